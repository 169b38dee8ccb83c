//! The first-party reward plugins (`plugins/rewards`) on ground-truth clips rendered by the
//! dataset's own renderer (host/procedural), through the real host and a real pipeline: a clip of
//! what the prompt says scores high, a clip of another colour or another motion scores low,
//! a blank clip scores nothing — for every colour, motion and background. And rewards named in
//! a request reach its output and its event stream, unknown ones are refused at admission.

use crate::common;

use std::sync::Arc;

use crate::common::{deploy, resolve_tiny, tiny_request, tiny_wan};
use fastvideo_pipeline::{CancelToken, PipelineRun, Reward, Values};
use fastvideo_plugin_host::{Binding, PluginKind, PluginReward};
use fastvideo_procedural::{render, Background, Clip, Color, Motion, Scene, Shape, Variation};
use fastvideo_request::{OmniEvent, OmniRequest};
use tch::{Device, Kind, Tensor};

fn reward(stem: &str, name: &str) -> Arc<dyn Reward> {
    let d = deploy(stem, name, &["tensor", "tensor-ops"], "").unwrap();
    let p = d.of_kind(PluginKind::Reward).next().unwrap().clone();
    Arc::new(PluginReward::new(&d, p))
}

fn video(clip: &Clip) -> Tensor {
    Tensor::from_slice(&clip.rgb)
        .reshape([clip.frames as i64, clip.height as i64, clip.width as i64, 3])
        .to_kind(Kind::Float)
        / 255.0
}

fn score(r: &dyn Reward, prompt: &str, clip: &Clip) -> f32 {
    let req = OmniRequest::text_to_video("reward-test", prompt).resolve(&common::limits(), || 0).unwrap();
    r.score(&req, &Default::default(), &video(clip)).unwrap()
}

fn scene(color: Color, motion: Motion, background: Background) -> Scene {
    Scene { shape: Shape::Square, color, motion, background }
}

#[test]
fn color_match_scores_the_prompts_colour() {
    let r = reward("fastvideo_reward_color_match", "color_match");
    for (i, &bg) in Background::ALL.iter().enumerate() {
        for (j, &c) in Color::ALL.iter().enumerate() {
            let s = scene(c, Motion::Left, bg);
            let clip = render(&s, &Variation::sample((i * 10 + j) as u64), 17, 64);
            let right = score(&*r, &s.prompt(), &clip);
            // Ground truth: the object is that colour; only its antialiased edge is off.
            assert!(right > 0.75, "{}: {right}", s.prompt());
            for &other in Color::ALL.iter().filter(|&&o| o != c) {
                let wrong = score(&*r, &scene(other, Motion::Left, bg).prompt(), &clip);
                assert!(wrong < right - 0.3, "{} scored {wrong} for {other:?} vs {right}", s.prompt());
            }
        }
    }
    // Nothing drawn: nothing to match.
    let blank = Clip { frames: 17, height: 64, width: 64, rgb: vec![245; 17 * 64 * 64 * 3] };
    assert_eq!(score(&*r, "a red circle moving left on a white background", &blank), 0.0);
}

#[test]
fn motion_direction_scores_the_prompts_motion() {
    let r = reward("fastvideo_reward_motion_direction", "motion_direction");
    for (i, &m) in Motion::ALL.iter().enumerate() {
        for (j, &bg) in Background::ALL.iter().enumerate() {
            let s = scene(Color::ALL[(i + j) % 6], m, bg);
            let clip = render(&s, &Variation::sample((i * 7 + j) as u64), 17, 64);
            let right = score(&*r, &s.prompt(), &clip);
            assert!(right > 0.5, "{}: {right}", s.prompt());
            // The opposite motion scores negative; a perpendicular one near 0.
            let opposite = match m {
                Motion::Left => Motion::Right,
                Motion::Right => Motion::Left,
                Motion::Up => Motion::Down,
                Motion::Down => Motion::Up,
                Motion::Growing => Motion::Shrinking,
                Motion::Shrinking => Motion::Growing,
            };
            let back = score(&*r, &scene(s.color, opposite, bg).prompt(), &clip);
            assert!(back < -0.5, "{} scored {back} as {opposite:?}", s.prompt());
            if matches!(m, Motion::Left | Motion::Right) {
                let across = score(&*r, &scene(s.color, Motion::Up, bg).prompt(), &clip);
                assert!(across.abs() < 0.25, "{} scored {across} as up", s.prompt());
            }
        }
    }
    // A still clip has not moved.
    let s = scene(Color::Red, Motion::Left, Background::White);
    let mut clip = render(&s, &Variation::canonical(), 17, 64);
    let first = clip.frame(0).to_vec();
    let n = first.len();
    for f in 1..17 {
        clip.rgb[f * n..(f + 1) * n].copy_from_slice(&first);
    }
    assert!(score(&*r, &s.prompt(), &clip).abs() < 0.05);
}

#[test]
fn prompts_without_the_words_are_refused_with_the_vocabulary() {
    let r = reward("fastvideo_reward_color_match", "color_match");
    let clip = render(&scene(Color::Red, Motion::Left, Background::White), &Variation::canonical(), 17, 64);
    let req = OmniRequest::text_to_video("reward-test", "a cat on a sofa").resolve(&common::limits(), || 0).unwrap();
    let e = format!("{:#}", r.score(&req, &Default::default(), &video(&clip)).unwrap_err());
    assert!(e.contains("color_match") && e.contains("background") && e.contains("white"), "{e}");
}

#[test]
fn rewards_reach_the_output_and_the_stream() {
    let d = Arc::new(deploy("fastvideo_reward_color_match", "color_match", &["tensor", "tensor-ops"], "").unwrap());
    let binding = d.bind("tiny");
    let spec = Arc::new(fastvideo_wan::pipeline::text_to_video_with(tiny_wan(), binding.policies.clone()).unwrap());
    let mut r = tiny_request("a red circle moving left on a white background", 2, 3);
    r.outputs.rewards = vec!["color_match".into()];
    let req = resolve_tiny(r.clone(), None);
    binding.check(&req).unwrap();
    let mut run = PipelineRun::new(spec, req, Device::Cpu, Values::default(), CancelToken::default());
    let mut events = Vec::new();
    run.run_to_end(&mut |e| events.push(e)).unwrap();
    let out = run.finish(&mut |e| events.push(e)).unwrap();
    let v = out.rewards["color_match"];
    assert!((0.0..=1.0).contains(&v), "{v}");
    assert!(events
        .iter()
        .any(|e| matches!(e, OmniEvent::Reward { name, value, .. } if name == "color_match" && *value == v)));
    // A reward the deploy does not enable is refused before any work, naming the field.
    r.outputs.rewards = vec!["aesthetics".into()];
    let e = binding.check(&resolve_tiny(r.clone(), None)).unwrap_err();
    assert_eq!(e.field, "outputs.rewards");
    assert!(e.rule.contains("aesthetics") && e.rule.contains("color_match"), "{e}");
    let e = Binding::none().check(&resolve_tiny(r, None)).unwrap_err();
    assert!(e.rule.contains("enables no reward plugins"), "{e}");
}

/// A reward whose manifest lists `score-latents` scores the final latents, not the video.
#[test]
fn a_latents_reward_gets_the_final_latents() {
    let d = Arc::new(deploy("fastvideo_testing_latent_mean", "latent_mean", &["tensor", "tensor-ops"], "").unwrap());
    let binding = d.bind("tiny");
    assert_eq!(binding.policies.rewards[0].input(), fastvideo_pipeline::RewardInput::Latents);
    let spec = Arc::new(fastvideo_wan::pipeline::text_to_video_with(tiny_wan(), binding.policies.clone()).unwrap());
    let mut r = tiny_request("a red circle moving left on a white background", 2, 3);
    r.outputs.rewards = vec!["latent_mean".into()];
    r.outputs.return_latents = true;
    let mut run = PipelineRun::new(spec, resolve_tiny(r, None), Device::Cpu, Values::default(), CancelToken::default());
    run.run_to_end(&mut |_| {}).unwrap();
    let out = run.finish(&mut |_| {}).unwrap();
    let Some(fastvideo_request::Artifact::Latents(l)) = out.artifacts.get("latents") else { panic!("no latents") };
    let want = l.data.iter().map(|x| x.abs()).sum::<f32>() / l.data.len() as f32;
    let got = out.rewards["latent_mean"];
    assert!((got - want).abs() <= 1e-5 * want, "{got} vs mean |latent| {want}");
}
