//! `--max-device-memory SIZE`: which weights live on the device and which stream from pinned
//! host memory, decided at load from the checkpoints' sizes.
//!
//! A quarter of the budget is left for activations (the largest, a 480×832×81 guided step or
//! the VAE's decode, measured in docs/operators.md). The rest holds weights, in this order:
//! everything, if it fits; else the text encoder streams (it runs once per prompt, so its
//! copies cost little: its layers pass through two slots and its token embedding stays on the
//! host); then, if the transformer still does not fit, its first blocks stay on the device and
//! the rest pass through two slots, a block's copy overlapping an earlier block's compute.

use std::path::Path;

use anyhow::{bail, ensure, Result};
use fastvideo_layers::block_stream::StreamPlan;
use tch::Device;

use crate::weights::Weights;
use crate::LoadOptions;

/// Device slots a streamed component cycles through: one block computing while the next copies.
pub const SLOTS: usize = 2;

/// What the checkpoints take on the device once loaded, in bytes.
#[derive(Debug, Clone, Default)]
pub struct Sizes {
    /// Each transformer block's tensors.
    pub transformer_blocks: Vec<u64>,
    /// The transformer outside its blocks (embedders, head).
    pub transformer_rest: u64,
    /// Each text-encoder layer's tensors.
    pub encoder_layers: Vec<u64>,
    /// The text encoder's token embedding (kept on the host when it streams).
    pub encoder_embed: u64,
    /// The text encoder's other tensors (final norm).
    pub encoder_rest: u64,
    /// Every other component (VAE, image encoder), always on the device.
    pub other: u64,
}

impl Sizes {
    fn transformer(&self) -> u64 {
        self.transformer_rest + self.transformer_blocks.iter().sum::<u64>()
    }
    fn encoder(&self) -> u64 {
        self.encoder_rest + self.encoder_embed + self.encoder_layers.iter().sum::<u64>()
    }
    /// Every weight on the device, nothing streamed.
    pub fn total(&self) -> u64 {
        self.transformer() + self.encoder() + self.other
    }
}

/// Where the weights go under a budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetPlan {
    /// The budget, in bytes.
    pub budget: u64,
    /// Bytes left for activations.
    pub reserve: u64,
    /// The transformer's streamed blocks, if any.
    pub transformer: Option<StreamPlan>,
    /// The text encoder's streamed layers, if it streams.
    pub text_encoder: Option<StreamPlan>,
    /// Weight bytes on the device (slots included).
    pub device_bytes: u64,
    /// Weight bytes waiting in host memory.
    pub host_bytes: u64,
}

/// Bytes left for activations under `budget`.
pub fn activation_reserve(budget: u64) -> u64 {
    budget / 4
}

fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

/// Plans `sizes` into `budget` bytes (see the module docs); an error says what the smallest
/// layout needs.
pub fn plan(budget: u64, sizes: &Sizes) -> Result<BudgetPlan> {
    let reserve = activation_reserve(budget);
    let room = budget.saturating_sub(reserve);
    let total = sizes.total();
    if total <= room {
        return Ok(BudgetPlan {
            budget,
            reserve,
            transformer: None,
            text_encoder: None,
            device_bytes: total,
            host_bytes: 0,
        });
    }
    let encoder_host = sizes.encoder_embed + sizes.encoder_layers.iter().sum::<u64>();
    let blocks = &sizes.transformer_blocks;
    // `k` slots of the largest block or layer (at most one per block).
    let slot = |b: &[u64], k: usize| b.iter().copied().max().unwrap_or(0) * k.min(b.len()) as u64;
    let fixed = |k: usize| sizes.other + sizes.encoder_rest + slot(&sizes.encoder_layers, k) + sizes.transformer_rest;
    let text_encoder = |k: usize| (!sizes.encoder_layers.is_empty()).then_some(StreamPlan { first: 0, slots: k });
    if fixed(SLOTS) + blocks.iter().sum::<u64>() <= room {
        return Ok(BudgetPlan {
            budget,
            reserve,
            transformer: None,
            text_encoder: text_encoder(SLOTS),
            device_bytes: fixed(SLOTS) + blocks.iter().sum::<u64>(),
            host_bytes: encoder_host,
        });
    }
    // Two slots overlap copies with compute; a budget without room for them streams through one.
    let smallest = |k: usize| fixed(k) + slot(blocks, k);
    let Some(k) = [SLOTS, 1].into_iter().find(|&k| smallest(k) <= room) else {
        bail!(
            "--max-device-memory {} is too small for this model: with every transformer block and text-encoder layer \
             streamed through one slot, its weights still need {} on the device, plus a quarter of the budget for \
             activations; give at least {}",
            size(budget),
            size(smallest(1)),
            size_up(smallest(1) / 3 * 4 + 4),
        );
    };
    // The first blocks that fit beside the slots stay resident.
    let mut left = room - smallest(k);
    let mut resident = 0;
    while resident < blocks.len() && blocks[resident] <= left {
        left -= blocks[resident];
        resident += 1;
    }
    let streamed: u64 = blocks[resident..].iter().sum();
    Ok(BudgetPlan {
        budget,
        reserve,
        transformer: Some(StreamPlan { first: resident, slots: k }),
        text_encoder: text_encoder(k),
        device_bytes: smallest(k) + blocks[..resident].iter().sum::<u64>(),
        host_bytes: encoder_host + streamed,
    })
}

const UNITS: [(u64, &str); 4] = [(1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K"), (1, "")];

/// `bytes` as `--max-device-memory` takes it: `23.5G`, `3.1M`.
fn size(bytes: u64) -> String {
    let (unit, name) = UNITS.into_iter().find(|(u, _)| bytes >= *u).unwrap_or((1, ""));
    format!("{:.1}{name}", bytes as f64 / unit as f64)
}

/// [`size`], rounded up to its last digit (a budget at least `bytes`).
fn size_up(bytes: u64) -> String {
    let (unit, name) = UNITS.into_iter().find(|(u, _)| bytes >= *u).unwrap_or((1, ""));
    format!("{:.1}{name}", (bytes as f64 / unit as f64 * 10.0).ceil() / 10.0)
}

impl BudgetPlan {
    /// One line for the load report: what streams, what stays.
    pub fn describe(&self, blocks: usize, layers: usize) -> String {
        let mut parts = vec![format!(
            "device budget {}: {} of weights on the device, {} left for activations",
            size(self.budget),
            size(self.device_bytes),
            size(self.reserve)
        )];
        if let Some(p) = self.transformer {
            parts.push(format!(
                "transformer blocks {}..{blocks} of {blocks} streamed from host memory through {} slots",
                p.first, p.slots
            ));
        }
        if self.text_encoder.is_some() {
            parts.push(format!("text encoder's {layers} layers streamed"));
        }
        if self.host_bytes > 0 {
            parts.push(format!("{} in host memory", size(self.host_bytes)));
        }
        parts.join("; ")
    }
}

/// What a Wan load is planning for: the checkpoints as mapped (nothing read yet).
pub struct LoadInputs<'a> {
    /// The model folder.
    pub dir: &'a Path,
    /// The transformer's weights and its block count.
    pub transformer: (&'a Weights, usize),
    /// The text encoder's weights and its layer count.
    pub text_encoder: (&'a Weights, usize),
    /// The VAE's weights.
    pub vae: &'a Weights,
    /// A two-expert model (Wan 2.2 A14B).
    pub two_experts: bool,
}

/// The plan for a Wan load: under `--max-device-memory`, or, on a GPU without one, under the
/// free memory when the weights would not fit in it; `None` when nothing streams.
pub fn for_load(opts: &LoadOptions, inputs: &LoadInputs) -> Result<Option<BudgetPlan>> {
    // Streaming on its own only where an explicit budget would be taken.
    let plain = !inputs.two_experts && !opts.offload_experts && !opts.fp8_linears;
    let auto = match (opts.max_device_memory, opts.device) {
        (Some(_), _) => None,
        (None, Device::Cuda(i)) if opts.auto_stream && plain => fastvideo_kernels::cuda::memory_free(i),
        (None, _) => return Ok(None),
    };
    let Some(budget) = opts.max_device_memory.or(auto) else { return Ok(None) };
    let Some(sizes) = sizes(inputs)? else {
        ensure!(auto.is_some(), "--max-device-memory plans from checkpoint files; these weights have none");
        return Ok(None);
    };
    if auto.is_some() && sizes.total() + activation_reserve(budget) <= budget {
        return Ok(None);
    }
    ensure!(
        !inputs.two_experts,
        "--max-device-memory streams the blocks of one transformer; for a two-expert model (Wan 2.2 A14B) use \
         --offload-experts, which keeps one expert on the device"
    );
    ensure!(!opts.offload_experts, "--max-device-memory and --offload-experts: choose one");
    ensure!(
        !opts.fp8_linears,
        "--max-device-memory streams blocks as they are stored; --fp8-linears would quantize them after streaming is \
         set up: drop one (an FP8 checkpoint file streams as it is)"
    );
    let p = plan(budget, &sizes)?;
    if let (Some(b), Device::Cuda(i)) = (opts.max_device_memory, opts.device) {
        enforce(i, b);
    }
    if auto.is_some() && (p.transformer.is_some() || p.text_encoder.is_some()) {
        tracing::warn!(
            need_gib = gib(sizes.total()),
            free_gib = gib(budget),
            "the weights do not fit in the device's free memory: streaming some from host memory \
             (--max-device-memory sets the budget)"
        );
    }
    Ok(Some(p))
}

/// Caps libtorch's allocator on device `ordinal` at the budgets of the models loaded there so
/// far (their sum: each model keeps within its own), so a plan that underestimates fails as out
/// of memory instead of passing the budget unseen.
fn enforce(ordinal: usize, budget: u64) {
    static BUDGETS: std::sync::Mutex<Vec<(usize, u64)>> = std::sync::Mutex::new(Vec::new());
    let mut all = BUDGETS.lock().unwrap_or_else(|e| e.into_inner());
    all.push((ordinal, budget));
    let cap = all.iter().filter(|(o, _)| *o == ordinal).map(|(_, b)| b).sum();
    if !fastvideo_kernels::cuda::limit_allocator(ordinal, cap) {
        tracing::warn!(
            ordinal,
            "--max-device-memory: the allocator cannot be capped here (no CUDA-graph library beside the binary); \
             the weights are placed by the budget but nothing stops activations from passing it"
        );
    }
}

/// The sizes of a Wan folder's components once loaded, or `None` for random weights.
fn sizes(inputs: &LoadInputs) -> Result<Option<Sizes>> {
    let (t, blocks) = inputs.transformer;
    let (e, layers) = inputs.text_encoder;
    let under = |w: &Weights, p: &str| w.loaded_bytes_under(p);
    let Some(t_total) = under(t, "") else { return Ok(None) };
    let transformer_blocks = (0..blocks).map(|i| under(t, &format!("blocks.{i}.")).unwrap_or(0)).collect::<Vec<_>>();
    let encoder_layers = (0..layers).map(|i| under(e, &format!("encoder.block.{i}.")).unwrap_or(0)).collect::<Vec<_>>();
    let embed = ["shared.weight", "encoder.embed_tokens.weight"]
        .iter()
        .find_map(|k| e.contains(k).then(|| under(e, k)).flatten())
        .unwrap_or(0);
    let e_total = under(e, "").unwrap_or(0);
    let clip_dir = inputs.dir.join("image_encoder");
    let clip = match clip_dir.join("config.json").is_file() {
        // The image encoder runs in float32 (`load_image_conditioning`).
        true => Weights::from_dir(&clip_dir, "model", Device::Cpu, tch::Kind::Float)?.loaded_bytes_under(""),
        false => None,
    };
    Ok(Some(Sizes {
        transformer_rest: t_total - transformer_blocks.iter().sum::<u64>(),
        transformer_blocks,
        encoder_rest: e_total.saturating_sub(embed + encoder_layers.iter().sum::<u64>()),
        encoder_layers,
        encoder_embed: embed,
        other: under(inputs.vae, "").unwrap_or(0) + clip.unwrap_or(0),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;

    fn wan_i2v_14b() -> Sizes {
        // Wan2.1-I2V-14B-480P in bf16: 40 blocks of 0.81 GB, UMT5-XXL, CLIP and the VAE.
        Sizes {
            transformer_blocks: vec![808_000_000; 40],
            transformer_rest: 420_000_000,
            encoder_layers: vec![386_000_000; 24],
            encoder_embed: 2_100_000_000,
            encoder_rest: 8_192,
            other: 1_500_000_000,
        }
    }

    #[test]
    fn everything_stays_when_it_fits() {
        let p = plan(80 * G, &wan_i2v_14b()).unwrap();
        assert_eq!((p.transformer, p.text_encoder, p.host_bytes), (None, None, 0));
        assert_eq!(p.device_bytes, wan_i2v_14b().total());
    }

    #[test]
    fn the_text_encoder_streams_before_the_transformer() {
        // 45 GiB: 30 for weights; the transformer (32.7 GB) fits once the encoder streams.
        let p = plan(45 * G, &wan_i2v_14b()).unwrap();
        assert_eq!(p.transformer, None);
        assert_eq!(p.text_encoder, Some(StreamPlan { first: 0, slots: SLOTS }));
        assert!(p.device_bytes <= 45 * G - p.reserve, "{p:?}");
    }

    #[test]
    fn a_24_gib_budget_streams_the_last_blocks_and_keeps_within_it() {
        let s = wan_i2v_14b();
        let p = plan(24 * G, &s).unwrap();
        let t = p.transformer.expect("the transformer streams");
        assert!(t.first > 0 && t.first < 40, "{t:?}");
        assert!(p.device_bytes <= 24 * G - p.reserve, "{p:?}");
        // One more resident block would not have fitted.
        assert!(p.device_bytes + s.transformer_blocks[t.first] > 24 * G - p.reserve);
        assert_eq!(p.device_bytes + p.host_bytes, s.total() + 2 * 808_000_000 + 2 * 386_000_000);
    }

    #[test]
    fn a_budget_without_room_for_two_slots_streams_through_one() {
        let s = wan_i2v_14b();
        let two = plan(24 * G, &s).unwrap();
        let mut b = 24 * G;
        let one = loop {
            b -= G / 4;
            let p = plan(b, &s).unwrap();
            if p.transformer.unwrap().slots == 1 {
                break p;
            }
        };
        // One slot only where two would not fit beside no resident block; a block may then fit.
        assert!(one.transformer.unwrap().first <= 1, "{one:?}");
        assert!(one.device_bytes <= b - one.reserve);
        assert_eq!(one.text_encoder.unwrap().slots, 1);
        assert!(two.transformer.unwrap().first > 0);
    }

    #[test]
    fn a_budget_too_small_names_what_the_smallest_layout_needs() {
        let e = plan(2 * G, &wan_i2v_14b()).unwrap_err().to_string();
        assert!(e.starts_with("--max-device-memory 2.0G is too small"), "{e}");
        let need: f64 = e.rsplit("give at least ").next().unwrap().trim_end_matches('G').parse().unwrap();
        assert!(plan((need * G as f64) as u64, &wan_i2v_14b()).is_ok(), "{e}");
        assert!(plan(((need - 0.1) * G as f64) as u64, &wan_i2v_14b()).is_err(), "{e}: the least, to a tenth");
    }
}
