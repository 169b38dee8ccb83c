//! `motion_direction`: how far the object travels in the direction the prompt names
//! (`moving left|right|up|down`, or `growing`/`shrinking` for its area), as a fraction of what
//! the dataset's clips do: 1 at the ground truth's displacement (40 % of the frame over the
//! clip; a growth of the area by its own mean), 0 for no motion, negative the wrong way,
//! clamped to [-1, 1] so going faster than the data earns nothing.
//!
//! The track is the soft mask's centroid per frame, weighted by how much object the frame has,
//! and the displacement is its weighted least-squares slope over the clip (all sums host ops).

#[path = "../../scene.rs"]
mod scene;

use fastvideo_plugin_sdk::{tensor_ops as ops, Reward, Tensor};

/// Displacement over the clip that scores 1 (the dataset moves objects ~40 % of the frame).
const FULL_MOVE: f32 = 0.4;
/// Area slope, relative to the mean area, that scores 1 for growing/shrinking.
const FULL_GROWTH: f32 = 1.0;

const DIRECTIONS: &[(&str, Direction)] = &[
    ("left", Direction::X(-1.0)),
    ("right", Direction::X(1.0)),
    ("up", Direction::Y(-1.0)),
    ("down", Direction::Y(1.0)),
    ("growing", Direction::Area(1.0)),
    ("shrinking", Direction::Area(-1.0)),
];

#[derive(Clone, Copy)]
enum Direction {
    X(f32),
    Y(f32),
    Area(f32),
}

struct MotionDirection;

/// Weighted least-squares slope of `ys` against `ts` with weights `ws` (each `[F]`).
fn slope(ts: &[f32], ws: &Tensor, ys: &Tensor, like: &Tensor) -> Result<f32, String> {
    let t = ops::constant(like, ts, &[ts.len() as i64])?;
    let (w0, wt) = (scene::total(ws)?, scene::total(&ops::mul(ws, &t)?)?);
    let wtt = scene::total(&ops::mul(ws, &ops::mul(&t, &t)?)?)?;
    let wy = scene::total(&ops::mul(ws, ys)?)?;
    let wty = scene::total(&ops::mul(ws, &ops::mul(&t, ys)?)?)?;
    let den = w0 * wtt - wt * wt;
    Ok(if den > 1e-9 { (w0 * wty - wt * wy) / den } else { 0.0 })
}

impl Reward for MotionDirection {
    fn init(_params: String) -> Result<(), String> {
        Ok(())
    }

    fn score(prompt: String, video: &Tensor) -> Result<f32, String> {
        let (f, h, w) = scene::dims(video)?;
        let bg = scene::background(&prompt)?;
        let Some((_, dir)) = scene::find(&prompt, DIRECTIONS) else {
            return Err(format!("the prompt names no motion (one of: {})", scene::names(DIRECTIONS)));
        };
        if f < 2 {
            return Err("a still image has no motion to score".into());
        }
        let mask = scene::object_mask(video, bg)?;
        let area = ops::sum(&mask, &[1, 2], false)?; // [F]
                                                     // A frame counts fully once its object covers 0.5 % of it (the analyzer's minimum area).
        let weights = ops::clamp(&ops::scale(&area, 1.0 / (0.005 * (h * w) as f32)), 0.0, 1.0);
        let ts: Vec<f32> = (0..f).map(|i| i as f32 / (f - 1) as f32).collect();
        let moved = match dir {
            Direction::X(sign) | Direction::Y(sign) => {
                let (n, shape) = match dir {
                    Direction::X(_) => (w, [1, 1, w]),
                    _ => (h, [1, h, 1]),
                };
                let grid: Vec<f32> = (0..n).map(|i| (i as f32 + 0.5) / n as f32).collect();
                let grid = ops::constant(video, &grid, &shape)?;
                let centroid =
                    ops::div(&ops::sum(&ops::mul(&mask, &grid)?, &[1, 2], false)?, &ops::add_scalar(&area, 1e-3))?;
                sign * slope(&ts, &weights, &centroid, video)? / FULL_MOVE
            }
            Direction::Area(sign) => {
                let mean = scene::total(&area)? / f as f32;
                if mean <= 0.0 {
                    return Ok(0.0);
                }
                sign * slope(&ts, &weights, &ops::scale(&area, 1.0 / mean), video)? / FULL_GROWTH
            }
        };
        Ok(moved.clamp(-1.0, 1.0))
    }
}

fastvideo_plugin_sdk::export_reward!(MotionDirection);
fastvideo_plugin_sdk::manifest! {
    name: "motion_direction",
    version: "0.1.0",
    kind: reward,
    hooks: [score],
    distribution_altering: false,
    description: "Displacement in the prompt's direction, 1 = the dataset's (-1..1)",
    params_schema: {"type": "object", "properties": {}, "additionalProperties": false},
}
