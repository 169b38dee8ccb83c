//! Test fixture for the host's failure isolation: a CFG guider that, when its `mode` parameter
//! says so, traps, spins forever, returns a wrong-shaped tensor, grows memory without bound,
//! hoards tensor handles, returns an error or logs 20,000 lines of 1,000 bytes per call (`spam`).
//! `mode = "count"` checks that globals start fresh in every request (a fresh instance per
//! request). `mode = "slow"` busy-loops a few milliseconds per call, under the call deadline,
//! for the per-request budget.

use std::sync::atomic::{AtomicU32, Ordering};

use fastvideo_plugin_sdk::{log, tensor_ops, Guider, StepContext, Tensor};

static MODE: AtomicU32 = AtomicU32::new(0);
static INITS: AtomicU32 = AtomicU32::new(0);
static mut HOARD: Vec<Tensor> = Vec::new();

const MODES: &[&str] = &["ok", "trap", "hang", "shape", "memory", "handles", "error", "count", "spam", "slow"];

/// Iterations `slow` spins per call: a few milliseconds, well under the 50 ms call deadline.
const SLOW_ITERS: u64 = 3_000_000;

/// Lines `spam` logs per call.
pub const SPAM_LINES: u32 = 20_000;

struct Misbehave;

impl Guider for Misbehave {
    fn init(params: String) -> Result<Vec<String>, String> {
        let mode = MODES.iter().position(|m| params.contains(&format!("\"mode\":\"{m}\""))).unwrap_or(0);
        MODE.store(mode as u32, Ordering::Relaxed);
        INITS.fetch_add(1, Ordering::Relaxed);
        Ok(vec!["cond".into(), "uncond".into()])
    }

    fn combine(ctx: StepContext, preds: Vec<Tensor>) -> Result<Tensor, String> {
        let s = ctx.guidance_scale;
        let guided = || tensor_ops::linear_combination(&[&preds[0], &preds[1]], &[s, 1.0 - s]);
        match MODES[MODE.load(Ordering::Relaxed) as usize] {
            "trap" => panic!("misbehave: trap on purpose"),
            "hang" => loop {
                core::hint::spin_loop();
            },
            "shape" => tensor_ops::mean(&preds[0], &[1], false),
            "memory" => {
                let mut v: Vec<Vec<u8>> = Vec::new();
                loop {
                    v.push(vec![1u8; 1 << 20]);
                }
            }
            "handles" => loop {
                let t = tensor_ops::scale(&preds[0], 1.0);
                #[allow(static_mut_refs)]
                unsafe {
                    HOARD.push(t)
                };
            },
            "error" => Err("misbehave: refusing on purpose".into()),
            "spam" => {
                let line = "spam ".repeat(200);
                for _ in 0..SPAM_LINES {
                    log::log(log::Level::Info, &line);
                }
                guided()
            }
            "slow" => {
                let mut x: u64 = 1;
                for i in 0..SLOW_ITERS {
                    x = core::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
                }
                guided()
            }
            "count" if INITS.load(Ordering::Relaxed) != 1 => {
                Err(format!("state leaked: init ran {} times in this instance", INITS.load(Ordering::Relaxed)))
            }
            _ => guided(),
        }
    }
}

fastvideo_plugin_sdk::export_guider!(Misbehave);
fastvideo_plugin_sdk::manifest! {
    name: "misbehave",
    version: "0.1.0",
    kind: guider,
    hooks: [combine],
    distribution_altering: true,
    params_schema: {
        "type": "object",
        "properties": {
            "mode": {"enum": ["ok", "trap", "hang", "shape", "memory", "handles", "error", "count", "spam", "slow"]}
        },
        "additionalProperties": false
    },
}
