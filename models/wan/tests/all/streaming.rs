//! `--max-device-memory`: blocks streamed from host memory through a few device slots compute
//! what resident blocks do. On the CPU the "device" slots are host tensors too, so these check
//! the bookkeeping (which block each slot holds, the cycle across forwards, skipped blocks, the
//! plan's refusals) and the weights' round trip bit for bit; the GPU script
//! (host/scripts/gpu/offload.sh) measures the overlap and the memory.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use fastvideo_layers::block_stream::StreamPlan;
use fastvideo_pipeline::{BlockAction, BlockHook, Value, Values};
use fastvideo_request::{ImageRole, InputImage, InputPart, OmniRequest, TaskType, TextRole};
use fastvideo_wan::pipeline::{self, values};
use fastvideo_wan::{LoadOptions, TransformerConfig, WanModel, WanTransformer3DModel, Weights};
use tch::{Device, Kind, Tensor};

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn fx(name: &str) -> &'static Tensor {
    crate::common::fixture("wan_i2v.safetensors", name)
}

fn budget(bytes: u64) -> LoadOptions {
    LoadOptions { max_device_memory: Some(bytes), ..LoadOptions::new(Device::Cpu) }
}

/// The smallest budget `folder` loads under (to the byte), with the model, and the error of a
/// budget below it.
fn tightest(folder: &str) -> (u64, WanModel, String) {
    let dir = fixture_dir().join(folder);
    let (mut lo, mut hi) = (1024u64, 1u64 << 30);
    let below = format!("{:#}", WanModel::load_with(&dir, budget(lo)).err().expect("1K is too small"));
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        match WanModel::load_with(&dir, budget(mid)) {
            Ok(_) => hi = mid,
            Err(_) => lo = mid,
        }
    }
    (hi, WanModel::load_with(&dir, budget(hi)).unwrap(), below)
}

/// Float32 on both sides: streaming changes where weights live, not what is computed.
#[test]
fn a_streamed_image_to_video_model_makes_diffusers_frames() {
    let (b, m, below) = tightest("tiny-wan-i2v");
    assert!(below.contains("--max-device-memory") && below.contains("give at least"), "{below}");
    let t = m
        .transformer
        .block_stream()
        .unwrap_or_else(|| panic!("nothing streams under {b}: {:?}", m.load_report.device_budget));
    assert_eq!(t.shape().0, 2 - t.first(), "the last blocks stream");
    assert!(t.first() < 2);
    assert!(m.text_encoder.block_stream().is_some(), "the text encoder streams first");
    let report = m.load_report.device_budget.clone().expect("the load reports the budget");
    assert!(report.contains("..2 of 2 streamed from host memory") && report.contains("text encoder"), "{report}");

    let spec = Arc::new(pipeline::text_to_video(&m, pipeline::default_guidance()).unwrap());
    let run = || {
        let mut limits = m.limits();
        limits.tasks.push(TaskType::T2v);
        let mut r = OmniRequest::text_to_video("stream", "a red circle moving left on a white background");
        r.inputs.push(InputPart::Text { text: "blurry low quality".into(), role: TextRole::Negative });
        (r.diffusion.height, r.diffusion.width, r.diffusion.num_frames) = (Some(32), Some(32), Some(9));
        (r.diffusion.num_inference_steps, r.diffusion.guidance_scale) = (Some(4), Some(5.0));
        r.outputs.return_latents = true;
        let mut req = r.resolve(&limits, || 0).unwrap();
        req.task = TaskType::I2v;
        let first = fx("pipeline.first");
        let (h, w, _) = first.size3().unwrap();
        let rgb = Vec::<u8>::try_from(first.flatten(0, -1)).unwrap();
        req.images.push(InputImage { role: ImageRole::FirstFrame, width: w as u32, height: h as u32, rgb });
        let mut init = Values::default();
        init.insert(values::INITIAL_LATENTS, Value::Tensor(fx("pipeline.latents_in").shallow_clone()));
        crate::common::run_pipeline(spec.clone(), req, init).0
    };
    let out = run();
    crate::common::assert_matches_reference(
        "i2v streamed",
        &out,
        fx("pipeline.i2v.latents_out"),
        fx("pipeline.i2v.video"),
    );
    // A second request finds the slots as the first left them.
    let again = run();
    assert_eq!(out.artifacts.get("latents"), again.artifacts.get("latents"), "the same latents on a second run");

    // A budget with room for everything streams nothing.
    let roomy = WanModel::load_with(&fixture_dir().join("tiny-wan-i2v"), budget(64 * b)).unwrap();
    assert!(roomy.transformer.block_stream().is_none() && roomy.text_encoder.block_stream().is_none());
    // A weight budget counts the streamed blocks as the slots they pass through.
    let (n, k, bytes) = t.shape();
    let counted = |m: &WanModel| fastvideo_wan::residency::resident_bytes(m);
    assert_eq!(counted(&roomy) - counted(&m), (n - k) as u64 * bytes);
    let report = roomy.load_report.device_budget.unwrap();
    assert!(report.starts_with("device budget") && !report.contains("streamed"), "{report}");
}

fn config(layers: i64) -> TransformerConfig {
    let mut cfg = TransformerConfig::load(&fixture_dir().join("tiny-wan/transformer/config.json")).unwrap();
    cfg.num_layers = layers;
    cfg
}

/// Skips blocks `from..to` after running block `from - 1`, as a block cache does.
struct Skip(usize, usize);

impl BlockHook for Skip {
    fn begin(&mut self, _: usize) -> anyhow::Result<()> {
        Ok(())
    }
    fn after_block(&mut self, i: usize, _: &Tensor, out: &Tensor) -> anyhow::Result<BlockAction> {
        Ok(match i + 1 == self.0 {
            true => BlockAction::SkipTo(self.1, out.shallow_clone()),
            false => BlockAction::Proceed,
        })
    }
    fn end(&mut self, _: &Tensor) -> anyhow::Result<()> {
        Ok(())
    }
}

#[test]
fn streamed_blocks_cycle_through_fewer_slots_than_blocks() {
    let w = Weights::random(7, Device::Cpu, Kind::Float);
    let resident = WanTransformer3DModel::new(config(5), &w).unwrap();
    let plan = StreamPlan { first: 1, slots: 2 };
    let streamed = WanTransformer3DModel::new_streamed(config(5), &w, Some(plan)).unwrap();
    let s = streamed.block_stream().unwrap();
    assert_eq!((s.first(), s.shape().0, s.shape().1), (1, 4, 2));
    assert_eq!(s.uploads(), 2, "the slots start with the first two streamed blocks");

    let latents = Tensor::randn([1, 4, 3, 8, 8], (Kind::Float, Device::Cpu));
    let t = Tensor::from_slice(&[500f32]);
    let text = Tensor::randn([1, 6, 32], (Kind::Float, Device::Cpu));
    let want = resident.forward(&latents, &t, &text).unwrap();
    for pass in 0..3 {
        let got = streamed.forward(&latents, &t, &text).unwrap();
        assert!(got.equal(&want), "forward {pass} differs from the resident model's");
    }
    assert_eq!(s.uploads(), 2 + 3 * 4, "one copy per streamed block per forward, no more");

    // A block cache skipping streamed blocks 2 and 3 passes their slots on: the next forward
    // still finds every block where the cycle put it.
    let skipped =
        |m: &WanTransformer3DModel| m.forward_hooked(&latents, &t, &text, None, Some(&mut Skip(2, 4))).unwrap();
    assert!(skipped(&streamed).equal(&skipped(&resident)));
    assert!(!skipped(&resident).equal(&want), "the skip changes the output");
    let before = s.uploads();
    assert!(streamed.forward(&latents, &t, &text).unwrap().equal(&want));
    assert_eq!(s.uploads() - before, 4, "no block was copied twice after the skip");
}

#[test]
fn a_budget_refuses_what_it_cannot_stream() {
    let err = |dir: &str, opts: LoadOptions| match WanModel::load_with(&fixture_dir().join(dir), opts) {
        Ok(_) => panic!("{dir} loaded"),
        Err(e) => format!("{e:#}"),
    };
    let e = err("tiny-wan22-t2v", budget(1 << 30));
    assert!(e.contains("two-expert") && e.contains("--offload-experts"), "{e}");
    let e = err("tiny-wan", LoadOptions { fp8_linears: true, ..budget(1 << 30) });
    assert!(e.contains("--fp8-linears"), "{e}");
    let e = err("tiny-wan", budget(1024));
    assert!(e.starts_with("--max-device-memory 1.0K is too small"), "{e}");

    // Merging adapters into streamed blocks would be undone by the next refill: refused.
    let w = Weights::random(7, Device::Cpu, Kind::Float);
    let m = WanTransformer3DModel::new_streamed(config(3), &w, Some(StreamPlan { first: 0, slots: 1 })).unwrap();
    let e = m.merge_adapters(&fastvideo_pipeline::AdapterSet::new(vec![])).unwrap_err().to_string();
    assert!(e.contains("--max-device-memory"), "{e}");
}
