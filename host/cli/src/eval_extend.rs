//! `fastvideo eval --extend`: does the prompt extender make free-form prompts work? Each
//! (scene, seed) is written as a held-out phrasing (`fastvideo-procedural`'s paraphrases: words
//! the text encoder does not know, templates the rewriter never saw) and generated twice from the
//! same noise: the phrasing as it is, and through the model's prompt extender. Prints the four
//! prompt attributes for both runs and how often the rewrite is exactly the scene's plain prompt.

use std::io::Write;
use std::sync::Arc;

use anyhow::{Context, Result};
use fastvideo_pipeline::{PipelineSpec, Values};
use fastvideo_procedural::{analyze, paraphrase, Clip, Scene, Split, Tally};
use fastvideo_request::{OmniOutput, OmniRequest, ResolvedRequest};

/// One eval run's inputs.
pub struct ExtendEval<'a> {
    pub scenes: &'a [Scene],
    pub seeds: u64,
    pub device: tch::Device,
    pub verbose: bool,
    pub json: bool,
}

fn generate(spec: &Arc<PipelineSpec>, req: ResolvedRequest, device: tch::Device) -> Result<(Clip, OmniOutput)> {
    let out = fastvideo_assembly::run_once(Arc::clone(spec), req, device, Values::default(), &mut |_| {})?;
    let v = out.video().context("the pipeline produced no video")?;
    let clip =
        Clip { frames: v.num_frames as usize, height: v.height as usize, width: v.width as usize, rgb: v.rgb.clone() };
    Ok((clip, out))
}

/// Runs the eval on `spec` (a pipeline with the extender's nodes); `build` makes the request of a
/// prompt and seed (sampling flags applied), resolved.
pub fn run(
    e: ExtendEval,
    spec: Arc<PipelineSpec>,
    build: impl Fn(&str, u64) -> Result<OmniRequest>,
    resolve: impl Fn(OmniRequest, u64) -> Result<ResolvedRequest>,
) -> Result<()> {
    let (mut plain, mut extended) = (Tally::default(), Tally::default());
    let mut exact = 0usize;
    let bar = indicatif::ProgressBar::new(e.scenes.len() as u64 * e.seeds);
    for scene in e.scenes {
        for seed in 0..e.seeds {
            let phrasing = paraphrase(scene, seed, Split::Eval);
            let (as_is, _) = generate(&spec, resolve(build(&phrasing, seed)?, seed)?, e.device)?;
            let mut r = build(&phrasing, seed)?;
            r.prompt_extend = true;
            let (rewritten, out) = generate(&spec, resolve(r, seed)?, e.device)?;
            let rewrite = out.extended_prompt.unwrap_or_default();
            exact += (rewrite == scene.prompt()) as usize;
            let ok = (plain.add(scene, &analyze(&as_is)), extended.add(scene, &analyze(&rewritten)));
            if e.verbose {
                let line = format!("{phrasing:?} -> {rewrite:?} (want {:?}); all four: {ok:?}", scene.prompt());
                bar.suspend(|| eprintln!("{line}"));
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let n = e.scenes.len() as u64 * e.seeds;
    eprintln!("{n} held-out phrasings ({} scenes x {} seeds)", e.scenes.len(), e.seeds);
    eprintln!("| prompt | colour | shape | motion | background | attribute mean | all four |");
    eprintln!("|---|---|---|---|---|---|---|");
    for (name, tally) in [("phrasing as written", &plain), ("extended (--extend-prompt)", &extended)] {
        let a = tally.accuracy();
        eprintln!(
            "| {name} | {:.1}% | {:.1}% | {:.1}% | {:.1}% | {:.1}% | {:.1}% |",
            100.0 * a.color,
            100.0 * a.shape,
            100.0 * a.motion,
            100.0 * a.background,
            100.0 * a.attribute_mean,
            100.0 * a.all_correct
        );
    }
    eprintln!("rewrites equal to the scene's plain prompt: {exact} of {n}");
    if e.json {
        let summary = serde_json::json!({
            "phrasings": n,
            "accuracy": {"as_written": plain.accuracy(), "extended": extended.accuracy()},
            "exact_rewrites": exact,
        });
        let _ = writeln!(std::io::stdout().lock(), "{}", serde_json::to_string_pretty(&summary)?);
    }
    Ok(())
}
