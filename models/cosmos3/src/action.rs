//! Action conditioning as `Cosmos3OmniPipeline` does it (diffusers' `CosmosActionCondition`):
//! the embodiment tables, the canvas tiers, the JSON caption the action model was trained on,
//! the conditioning clip fitted into the canvas (downscaled only, bicubic antialiased, padded
//! right and bottom) and the initial actions.

use std::collections::BTreeMap;

use anyhow::{ensure, Result};
use fastvideo_layers::image_processor::pil::{resize, Filter};
use fastvideo_request::{ActionDomain, ActionLimits, CanvasBin, ResolvedAction, TaskType};
use tch::{Device, Kind, Tensor};

/// Embodiments: name, weight id, action width (none: no fixed width, not runnable).
const DOMAINS: &[(&str, u32, Option<u32>)] = &[
    ("no_action", 0, None),
    ("av", 1, Some(9)),
    ("camera_pose", 2, Some(9)),
    ("hand_pose", 3, Some(57)),
    ("pusht", 4, Some(2)),
    ("libero", 5, None),
    ("umi", 6, Some(10)),
    ("bridge_orig_lerobot", 7, Some(10)),
    ("droid_lerobot", 8, Some(10)),
    ("robomind-franka", 8, Some(10)),
    ("galbot", 9, Some(30)),
    ("robomind-franka-dual", 12, Some(20)),
    ("robomind-ur", 13, Some(10)),
    ("agibotworld", 15, Some(29)),
    ("agibot_gear_gripper", 15, Some(29)),
    ("agibot_gear_gripper_ext", 15, Some(29)),
    ("fractal", 20, Some(10)),
];

/// One canvas: `(height / width, height, width)`.
type Bin = (f64, u32, u32);

/// Canvas bins per tier, in the reference's order.
const TIERS: &[(u32, [Bin; 5])] = &[
    (256, [(1.0, 256, 256), (0.8, 256, 320), (1.25, 320, 256), (0.6, 192, 320), (1.6666666666666667, 320, 192)]),
    (
        480,
        [
            (1.0, 640, 640),
            (0.7391304347826086, 544, 736),
            (1.3529411764705883, 736, 544),
            (0.5769230769230769, 480, 832),
            (1.7333333333333334, 832, 480),
        ],
    ),
    (
        704,
        [
            (1.0, 960, 960),
            (0.7647058823529411, 832, 1088),
            (1.3076923076923077, 1088, 832),
            (0.55, 704, 1280),
            (1.8181818181818181, 1280, 704),
        ],
    ),
    (
        720,
        [
            (1.0, 960, 960),
            (0.7536231884057971, 832, 1104),
            (1.3269230769230769, 1104, 832),
            (0.5625, 720, 1280),
            (1.7777777777777777, 1280, 720),
        ],
    ),
];

/// Viewpoints and the framing sentence the caption carries for each.
const VIEW_POINTS: &[(&str, &str)] = &[
    ("ego_view", "This video is captured from a first-person perspective looking at the scene."),
    (
        "third_person_view",
        "This video is captured from a third-person perspective looking towards the agent from the front.",
    ),
    ("wrist_view", "This video is captured from a wrist-mounted camera."),
    ("concat_view", "This video contains concatenated views from multiple camera perspectives."),
];

/// The action rules of a model whose actions are `action_dim` wide.
pub fn limits(action_dim: u32, spatial: u32, temporal: u32) -> ActionLimits {
    ActionLimits {
        action_dim,
        domains: DOMAINS
            .iter()
            .map(|&(n, id, w)| (n.to_string(), ActionDomain { id, width: w.filter(|&w| w <= action_dim) }))
            .collect::<BTreeMap<_, _>>(),
        tiers: TIERS
            .iter()
            .map(|(t, bins)| {
                (*t, bins.iter().map(|&(ratio, height, width)| CanvasBin { ratio, height, width }).collect())
            })
            .collect(),
        default_tier: 480,
        view_points: VIEW_POINTS.iter().map(|(v, _)| v.to_string()).collect(),
        default_view_point: "ego_view".into(),
        spatial_multiple: spatial,
        frame_multiple: temporal,
    }
}

/// `s` as Python's `json.dumps` writes a string (ASCII only, `\uXXXX` escapes).
fn py_json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The structured caption (`_build_action_json_prompt`), serialised as `json.dumps` does.
pub fn caption(description: &str, view_point: &str, frames: u32, fps: f64, height: u32, width: u32) -> String {
    let seconds = if fps > 0.0 { frames as f64 / fps } else { 0.0 };
    let duration = seconds as i64;
    let end = seconds.round_ties_even() as i64;
    let (minutes, secs) = (end / 60, end % 60);
    let mut desc = description.trim().to_string();
    if !desc.is_empty() && !desc.ends_with(['.', '!', '?']) {
        desc.push('.');
    }
    let ratio = if height > 0 { width as f64 / height as f64 } else { 1.0 };
    let mut aspect = ("1,1", f64::INFINITY);
    for (name, a, b) in [("1,1", 1, 1), ("4,3", 4, 3), ("3,4", 3, 4), ("16,9", 16, 9), ("9,16", 9, 16)] {
        let d = (a as f64 / b as f64 - ratio).abs();
        if d < aspect.1 {
            aspect = (name, d);
        }
    }
    let mut parts = Vec::new();
    if let Some((_, framing)) = VIEW_POINTS.iter().find(|(v, _)| *v == view_point) {
        parts.push(format!("\"cinematography\": {{\"framing\": {}}}", py_json_str(framing)));
    }
    parts.push(format!(
        "\"actions\": [{{\"time\": \"0:00-{minutes}:{secs:02}\", \"description\": {}}}]",
        py_json_str(&desc)
    ));
    parts.push(format!("\"duration\": \"{duration}s\""));
    parts.push(format!("\"fps\": {fps:?}"));
    parts.push(format!("\"resolution\": {{\"H\": {height}, \"W\": {width}}}"));
    parts.push(format!("\"aspect_ratio\": \"{}\"", aspect.0));
    format!("{{{}}}", parts.join(", "))
}

/// Frames of RGB8 pictures, as a request carries them.
pub struct Clip<'a> {
    /// `frames · height · width · 3` bytes.
    pub rgb: &'a [u8],
    /// Frames.
    pub frames: usize,
    /// Pixels.
    pub width: usize,
    /// Pixels.
    pub height: usize,
}

/// The conditioning clip fitted into the canvas: `([1, 3, F, H, W]` in [-1, 1], content
/// `(height, width)` inside it).
pub fn fit_clip(
    clip: Clip,
    frames: i64,
    canvas: (u32, u32),
    spatial: u32,
    device: Device,
) -> Result<(Tensor, (i64, i64))> {
    let Clip { rgb, frames: n, width: w, height: h } = clip;
    let m = spatial as usize;
    let (fw, fh) = (w - w % m, h - h % m);
    ensure!(n > 0 && fw > 0 && fh > 0, "action clip: {n} frames of {w}x{h}");
    let per = w * h * 3;
    let mut data = Vec::with_capacity(n * fw * fh * 3);
    for f in 0..n {
        data.extend(resize(Filter::Bilinear, &rgb[f * per..(f + 1) * per], w, h, fw, fh));
    }
    let x = Tensor::from_slice(&data).to_device(device).view([n as i64, fh as i64, fw as i64, 3]).to_kind(Kind::Float)
        / 255.0;
    let x = (x * 2.0 - 1.0).permute([0, 3, 1, 2]);
    let x = match frames - n as i64 {
        pad if pad > 0 => {
            Tensor::cat(&[&x, &x.narrow(0, n as i64 - 1, 1).expand([pad, 3, fh as i64, fw as i64], false)], 0)
        }
        _ => x.narrow(0, 0, frames),
    };
    let (th, tw) = (canvas.0 as f64, canvas.1 as f64);
    let scale = (tw / fw as f64).min(th / fh as f64).min(1.0);
    let ch = ((scale * fh as f64 + 0.5) as i64).max(1);
    let cw = ((scale * fw as f64 + 0.5) as i64).max(1);
    let x = if ch != fh as i64 || cw != fw as i64 {
        x.internal_upsample_bicubic2d_aa([ch, cw], false, None, None)
    } else {
        x
    };
    let (pr, pb) = (canvas.1 as i64 - cw, canvas.0 as i64 - ch);
    let x = if pr > 0 || pb > 0 {
        if pr >= cw || pb >= ch {
            x.replication_pad2d([0, pr, 0, pb])
        } else {
            x.reflection_pad2d([0, pr, 0, pb])
        }
    } else {
        x
    };
    Ok((x.permute([1, 0, 2, 3]).unsqueeze(0), (ch, cw)))
}

/// Latent frames given clean for `task` of `latent_frames`.
pub fn clean_vision_frames(task: TaskType, latent_frames: i64) -> Vec<i64> {
    match task {
        TaskType::InverseDynamics => (0..latent_frames).collect(),
        _ => vec![0],
    }
}

/// The clean actions `[chunk, action_dim]` and which steps are clean: forward dynamics' given
/// actions (the last repeated to the chunk, zero-padded to the model's width), every step
/// clean; otherwise zeros, none clean.
pub fn clean_actions(task: TaskType, a: &ResolvedAction, action_dim: i64, device: Device) -> (Tensor, Vec<i64>) {
    let chunk = a.chunk_size as i64;
    let x0 = Tensor::zeros([chunk, action_dim], (Kind::Float, device));
    match (&a.raw_actions, task) {
        (Some(rows), TaskType::ForwardDynamics) => {
            let w = a.width as i64;
            let flat: Vec<f32> =
                (0..chunk as usize).flat_map(|i| rows[i.min(rows.len() - 1)].iter().copied()).collect();
            let given = Tensor::from_slice(&flat).to_device(device).view([chunk, w]);
            x0.narrow(1, 0, w).copy_(&given);
            (x0, (0..chunk).collect())
        }
        _ => (x0, Vec::new()),
    }
}
