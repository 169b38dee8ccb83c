//! LoRA parity against diffusers' `load_lora_weights` + peft on the tiny Wan transformers, float32
//! on CPU: each format unmerged (against `set_adapters` strengths) and merged (against
//! `fuse_lora`), two adapters stacked, the I2V image path, a batch mixing adapter sets, strength 0
//! and unmerging. Fixtures from tests/fixtures/make_lora_fixtures.py. Error measure:
//! max |ours - reference| / max |reference|.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use fastvideo_lora::LoraFile;
use fastvideo_pipeline::{AdapterRows, AdapterSet, PreparedAdapter};
use fastvideo_wan::lora_keys::WanKeys;
use fastvideo_wan::{WanModel, WanTransformer3DModel};
use tch::{Device, Tensor};

/// float32 on CPU: what is left is summation order (peft scales the pair's output, merging sums
/// in float32 once).
const TOLERANCE: f64 = 2e-6;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn fx(name: &str) -> &'static Tensor {
    crate::common::fixture("lora_outputs.safetensors", name)
}

fn load(folder: &str) -> WanModel {
    WanModel::load(&fixtures().join(folder), Device::Cpu).expect("tiny model loads")
}

fn adapter(t: &WanTransformer3DModel, name: &str) -> Arc<PreparedAdapter> {
    let file = LoraFile::read(&fixtures().join("lora").join(format!("{name}.safetensors")), &WanKeys).unwrap();
    Arc::new(t.prepare_adapter(&file, name, "hash").unwrap())
}

fn rel_err(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.size(), b.size(), "shape mismatch");
    (a - b).abs().max().double_value(&[]) / b.abs().max().double_value(&[]).max(1e-12)
}

/// The tiny T2V transformer's forward on the fixture inputs, `rows` times stacked.
fn t2v(t: &WanTransformer3DModel, set: Option<&AdapterSet>, rows: i64) -> Tensor {
    let x = Tensor::cat(&vec![fx("t2v.hidden_states"); rows as usize], 0);
    let c = Tensor::cat(&vec![fx("t2v.encoder_hidden_states"); rows as usize], 0);
    let ts = fx("t2v.timestep").repeat([rows]);
    let lora = AdapterRows::all(set, rows);
    tch::no_grad(|| t.forward_adapted(&x, &ts, &c, None, lora.as_ref(), None)).unwrap()
}

fn weights(t: &WanTransformer3DModel) -> Vec<Tensor> {
    t.linears().iter().flat_map(|l| std::iter::once(l.weight.copy()).chain(l.bias.as_ref().map(Tensor::copy))).collect()
}

#[test]
fn every_format_matches_diffusers_unmerged_and_merged() {
    let m = load("tiny-wan");
    let t = &m.transformer;
    let base = t2v(t, None, 1);
    assert!(rel_err(&base, fx("t2v.base")) < TOLERANCE);
    let original_weights = weights(t);
    for (name, strength) in [("diffusers", 0.8), ("original", 1.0), ("kohya", -0.6), ("lightx2v", 0.7)] {
        let set = AdapterSet::new(vec![(adapter(t, name), strength)]);
        let unmerged = t2v(t, Some(&set), 1);
        let e = rel_err(&unmerged, fx(&format!("t2v.{name}.unmerged")));
        let moved = rel_err(&base, fx(&format!("t2v.{name}.unmerged")));
        eprintln!("{name}: unmerged relative error {e:.3e} (the adapter moves the output by {moved:.3})");
        assert!(e < TOLERANCE, "{name} unmerged: {e}");
        assert!(moved > 0.05, "{name}: the adapter must change the output visibly ({moved})");
        t.merge_adapters(&set).unwrap();
        assert_eq!(t.merged_adapters().as_deref(), Some(set.key()));
        let merged = t2v(t, Some(&set), 1);
        let e = rel_err(&merged, fx(&format!("t2v.{name}.fused")));
        eprintln!("{name}: merged relative error {e:.3e}");
        assert!(e < TOLERANCE, "{name} merged: {e}");
        // A row without the merged set would compute on the wrong weights: refused.
        let err = tch::no_grad(|| {
            t.forward_adapted(
                fx("t2v.hidden_states"),
                fx("t2v.timestep"),
                fx("t2v.encoder_hidden_states"),
                None,
                None,
                None,
            )
        })
        .unwrap_err();
        assert!(err.to_string().contains("merged adapters"), "{err}");
        t.unmerge_adapters();
        for (a, b) in weights(t).iter().zip(&original_weights) {
            assert!(a.equal(b), "{name}: unmerging must restore the weights bit for bit");
        }
        assert!(t2v(t, None, 1).equal(&base), "{name}: the plain forward after unmerging");
    }
}

#[test]
fn stacked_adapters_match_diffusers() {
    let m = load("tiny-wan");
    let t = &m.transformer;
    let set = AdapterSet::new(vec![(adapter(t, "diffusers"), 0.5), (adapter(t, "original"), -0.7)]);
    let e = rel_err(&t2v(t, Some(&set), 1), fx("t2v.stacked.unmerged"));
    eprintln!("stacked: unmerged relative error {e:.3e}");
    assert!(e < TOLERANCE, "stacked unmerged: {e}");
    t.merge_adapters(&set).unwrap();
    let e = rel_err(&t2v(t, Some(&set), 1), fx("t2v.stacked.unmerged"));
    t.unmerge_adapters();
    eprintln!("stacked: merged relative error {e:.3e}");
    assert!(e < TOLERANCE, "stacked merged: {e}");
}

#[test]
fn the_image_path_of_an_i2v_model_takes_adapters() {
    let m = load("tiny-wan-i2v");
    let t = &m.transformer;
    let set = AdapterSet::new(vec![(adapter(t, "i2v"), 0.9)]);
    let run = |set: Option<&AdapterSet>| {
        let lora = AdapterRows::all(set, 1);
        tch::no_grad(|| {
            t.forward_adapted(
                fx("i2v.hidden_states"),
                fx("t2v.timestep"),
                fx("i2v.encoder_hidden_states"),
                Some(fx("i2v.encoder_hidden_states_image")),
                lora.as_ref(),
                None,
            )
        })
        .unwrap()
    };
    let e = rel_err(&run(None), fx("i2v.base"));
    eprintln!("i2v base: relative error {e:.3e}");
    assert!(e < TOLERANCE, "i2v base: {e}");
    for merged in [false, true] {
        if merged {
            t.merge_adapters(&set).unwrap();
        }
        let reference = fx(if merged { "i2v.i2v.fused" } else { "i2v.i2v.unmerged" });
        let e = rel_err(&run(Some(&set)), reference);
        eprintln!("i2v (merged: {merged}): relative error {e:.3e}");
        assert!(e < TOLERANCE, "i2v merged={merged}: {e}");
    }
    t.unmerge_adapters();
    // The adapter's modules are the image path's: a text-to-video model has none of them.
    let t2v_model = load("tiny-wan");
    let file = LoraFile::read(&fixtures().join("lora/i2v.safetensors"), &WanKeys).unwrap();
    let err = t2v_model.transformer.prepare_adapter(&file, "i2v", "h").unwrap_err();
    assert!(format!("{err:#}").contains("diffusion_model.blocks.0.cross_attn.k_img.lora_down.weight"), "{err:#}");
}

#[test]
fn a_batch_mixing_adapter_sets_gives_each_row_its_own_output() {
    let m = load("tiny-wan");
    let t = &m.transformer;
    let a = AdapterSet::new(vec![(adapter(t, "diffusers"), 0.8)]);
    let b = AdapterSet::new(vec![(adapter(t, "kohya"), -0.6), (adapter(t, "lightx2v"), 0.7)]);
    // Rows: a, a, none, b — four requests' rows as a batched step lays them out.
    let mut rows = AdapterRows::default();
    rows.push(Some(&a), 0, 1);
    rows.push(Some(&a), 1, 1);
    rows.push(None, 2, 1);
    rows.push(Some(&b), 3, 1);
    assert_eq!(rows.groups.len(), 2, "adjacent rows of one set form one group");
    let x = Tensor::cat(&[fx("t2v.hidden_states"); 4], 0);
    let c = Tensor::cat(&[fx("t2v.encoder_hidden_states"); 4], 0);
    let ts = Tensor::from_slice(&[611f32, 300.0, 611.0, 611.0]);
    let out = tch::no_grad(|| t.forward_adapted(&x, &ts, &c, None, Some(&rows), None)).unwrap();
    let alone = |set: Option<&AdapterSet>, ts: f32| {
        let lora = AdapterRows::all(set, 1);
        let ts = Tensor::from_slice(&[ts]);
        tch::no_grad(|| t.forward_adapted(&x.narrow(0, 0, 1), &ts, &c.narrow(0, 0, 1), None, lora.as_ref(), None))
            .unwrap()
    };
    for (i, set, ts) in [(0, Some(&a), 611f32), (1, Some(&a), 300.0), (2, None, 611.0), (3, Some(&b), 611.0)] {
        let e = rel_err(&out.narrow(0, i, 1), &alone(set, ts));
        eprintln!("mixed batch row {i}: relative error against running alone {e:.3e}");
        assert!(e < TOLERANCE, "row {i}: {e}");
    }
    let e = rel_err(&out.narrow(0, 3, 1), fx("t2v.base"));
    assert!(e > 0.05, "row 3 ran with its adapters ({e})");
}

#[test]
fn strength_zero_is_bit_identical_to_no_adapter() {
    let m = load("tiny-wan");
    let t = &m.transformer;
    let zero = AdapterSet::new(vec![(adapter(t, "original"), 0.0), (adapter(t, "kohya"), 0.0)]);
    assert!(zero.is_empty());
    let base = t2v(t, None, 1);
    assert!(t2v(t, Some(&zero), 1).equal(&base));
    t.merge_adapters(&zero).unwrap();
    assert_eq!(t.merged_adapters(), None, "merging nothing leaves the weights alone");
    assert!(t2v(t, Some(&zero), 1).equal(&base));
}

#[test]
fn files_that_do_not_fit_the_model_name_the_key() {
    // The I2V model is bigger (in_channels 12) but has the same blocks: a T2V adapter fits it;
    // a file for another width does not, and the error names the tensor and both shapes.
    let m = load("tiny-wan-i2v");
    let file = LoraFile::read(&fixtures().join("lora/original.safetensors"), &WanKeys).unwrap();
    m.transformer.prepare_adapter(&file, "original", "h").expect("same blocks, same shapes");
    let mut wide = file.clone();
    let p = wide.modules.get_mut("blocks.1.ffn.net.2").unwrap();
    let down = p.down.as_mut().unwrap();
    down.shape = vec![down.shape[0], 7];
    down.data.truncate(down.shape[0] * 7 * 4);
    let err = m.transformer.prepare_adapter(&wide, "wide", "h").unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains("adapter `wide`") && msg.contains("blocks.1.ffn.2.lora_down.weight"), "{msg}");
    assert!(msg.contains("has 48"), "{msg}");
}

#[test]
fn adapters_take_each_modules_dtype_in_a_bf16_model() {
    // bf16 model: the timestep embedder stays float32 (as diffusers keeps it), the rest bf16; an
    // adapter on both runs (its tensors in each module's dtype), unmerged and merged.
    let mut opts = fastvideo_wan::LoadOptions::new(Device::Cpu);
    opts.dtype = fastvideo_torch::DtypeChoice::Bf16;
    let m = WanModel::load_with(&fixtures().join("tiny-wan"), opts).unwrap();
    let t = &m.transformer;
    let mut file = LoraFile::read(&fixtures().join("lora/original.safetensors"), &WanKeys).unwrap();
    let q = file.modules["blocks.0.attn1.to_q"].clone();
    file.modules.insert("condition_embedder.time_embedder.linear_2".into(), q);
    let set = AdapterSet::new(vec![(Arc::new(t.prepare_adapter(&file, "mixed", "h").unwrap()), 0.8)]);
    let base = t2v(t, None, 1);
    let unmerged = t2v(t, Some(&set), 1);
    t.merge_adapters(&set).unwrap();
    let merged = t2v(t, Some(&set), 1);
    t.unmerge_adapters();
    assert!(rel_err(&unmerged, &base) > 0.05, "the adapter acts");
    let e = rel_err(&merged, &unmerged);
    assert!(e < 2e-2, "bf16 merged vs unmerged: {e}"); // tolerance: bf16 rounding of the merged weights
}

#[test]
fn text_encoder_adapters_match_transformers_and_key_the_embedding_cache() {
    use fastvideo_pipeline::{AdapterTarget, Value, Values, ADAPTERS};
    let m = load("tiny-wan");
    let target = fastvideo_wan::adapters::WanAdapters::of(&m);
    let file = LoraFile::read(&fixtures().join("lora/text_encoder.safetensors"), &WanKeys).unwrap();
    assert_eq!((file.modules.len(), file.text.len()), (0, 14));
    let adapter = Arc::new(target.prepare(&file, "te", "h").unwrap());
    let set = AdapterSet::new(vec![(adapter, 0.7)]);
    let (ids, mask) = (fx("te.input_ids"), fx("te.attention_mask"));
    let run = |set: Option<&AdapterSet>| {
        let rows = AdapterRows::text(set);
        tch::no_grad(|| m.text_encoder.forward_lora(ids, mask, rows.as_ref())).unwrap()
    };
    let base = rel_err(&run(None), fx("te.base"));
    let e = rel_err(&run(Some(&set)), fx("te.adapted"));
    eprintln!("text encoder: base {base:.3e}, adapted relative error {e:.3e}");
    // The reference merges the pairs into the weights; we run them unmerged: float32 summation
    // order over 2 layers (measured 1.7e-6).
    assert!(base < TOLERANCE && e < 1e-5, "text encoder with its adapter: {e}");
    assert!(rel_err(fx("te.adapted"), fx("te.base")) > 0.05, "the adapter moves the encoder's output");
    // Through the pipeline: the text encoder's adapters change the video; prompt embeddings made
    // with them are cached under the set, so a plain request after one still gets plain ones.
    let spec = Arc::new(fastvideo_wan::pipeline::text_to_video(&m, Arc::new(fastvideo_pipeline::ClassicCfg)).unwrap());
    let limits = m.limits();
    let request = || {
        let mut r = fastvideo_request::OmniRequest::text_to_video("r", "a red circle");
        r.sampling.seed = Some(3);
        r.diffusion.num_inference_steps = Some(2);
        r.diffusion.num_frames = Some(5);
        (r.diffusion.height, r.diffusion.width) = (Some(32), Some(32));
        r.resolve(&limits, || 3).unwrap()
    };
    let video = |with: Option<Arc<AdapterSet>>| {
        let mut values = Values::default();
        if let Some(s) = with {
            values.insert(ADAPTERS, Value::Adapters(s));
        }
        crate::common::run_pipeline(Arc::clone(&spec), request(), values).0.video().unwrap().rgb.clone()
    };
    let plain = video(None);
    let adapted = video(Some(Arc::new(set)));
    assert_ne!(plain, adapted, "text-encoder adapters change the video");
    assert_eq!(video(None), plain, "the plain embedding is not the adapted one from the cache");
}
