//! Batched steps: started requests whose next step has the same batch key run it as one call.
//! Plain functions over the executor's jobs, so the executor keeps the bookkeeping (costs,
//! scheduler, failures) in one place.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use fastvideo_pipeline::PipelineRun;
use fastvideo_request::OmniEvent;
use tokio::sync::mpsc;

use super::command::Job;
use super::model::Classifier;
use crate::EngineError;

/// A span naming the scheduler slots stepped together (for logs).
fn jobs_span(keys: &[u64]) -> tracing::span::EnteredSpan {
    tracing::debug_span!("step_batch", slots = ?keys).entered()
}

/// Started requests whose next step can run in one call with `k`'s (same batch key), at most
/// `max_batch - 1` of them, lowest slots first; for loops that count tokens, only those that
/// keep the step within `max_tokens` (first fit: a large request skipped, a smaller later one
/// may still join).
pub(super) fn partners(jobs: &HashMap<u64, Job>, k: u64, max_batch: usize, max_tokens: u64) -> Vec<u64> {
    if max_batch < 2 {
        return Vec::new();
    }
    let Some(run) = jobs.get(&k).and_then(|j| j.run.as_ref()) else { return Vec::new() };
    let Some(key) = run.batch_key() else { return Vec::new() };
    // Same model too: two models' steps may have equal keys (latent shapes) but not weights.
    let same = |r: &PipelineRun| std::sync::Arc::ptr_eq(r.spec(), run.spec()) && r.batch_key() == Some(key);
    let mut partners: Vec<u64> =
        jobs.iter().filter(|(o, j)| **o != k && j.run.as_ref().is_some_and(same)).map(|(o, _)| *o).collect();
    partners.sort_unstable();
    if let Some(used) = run.batch_tokens() {
        let tokens = |o: &u64| jobs[o].run.as_ref().and_then(PipelineRun::batch_tokens).unwrap_or(0);
        partners = within_budget(used, &partners, tokens, max_tokens);
    }
    partners.truncate(max_batch - 1);
    partners
}

/// The `candidates` (in order) that join a step already holding `used` tokens without its sum
/// passing `max_tokens`: first fit, so a large one skipped leaves room for smaller ones after it.
fn within_budget(mut used: u64, candidates: &[u64], tokens: impl Fn(&u64) -> u64, max_tokens: u64) -> Vec<u64> {
    let mut out = Vec::new();
    for c in candidates {
        let t = tokens(c);
        if used + t <= max_tokens {
            used += t;
            out.push(*c);
        }
    }
    out
}

/// One step of every job (all started, slots `keys`) as one batched call: each job's outcome,
/// and the seconds the call took. A panic fails every job of the batch.
pub(super) fn step(jobs: &mut [Job], keys: &[u64], classify: Classifier) -> (Vec<Result<(), EngineError>>, f64) {
    let senders: Vec<mpsc::UnboundedSender<OmniEvent>> = jobs.iter().map(|j| j.events.clone()).collect();
    let t = Instant::now();
    let results = {
        let mut runs: Vec<&mut PipelineRun> = jobs.iter_mut().map(|j| j.run.as_mut().expect("started")).collect();
        let _e = jobs_span(keys);
        catch_unwind(AssertUnwindSafe(|| PipelineRun::step_batch(&mut runs, &mut |i, e| drop(senders[i].send(e)))))
    };
    let seconds = t.elapsed().as_secs_f64();
    let n = keys.len();
    let results = match results {
        Ok(rs) => rs
            .into_iter()
            .map(|r| r.map_err(|e| EngineError::Failed { code: classify(&e).to_string(), message: format!("{e:#}") }))
            .collect(),
        Err(p) => {
            let message = format!("batched step panicked: {}", fastvideo_torch::panic_message(p.as_ref()));
            (0..n)
                .map(|_| Err(EngineError::Failed { code: "internal_error".into(), message: message.clone() }))
                .collect()
        }
    };
    (results, seconds)
}

#[cfg(test)]
mod tests {
    use super::within_budget;

    #[test]
    fn partners_fill_the_token_budget_first_fit() {
        let tokens = |k: &u64| [0, 4_608, 9_216, 1_536, 4_608][*k as usize];
        // 4608 held; 9216 would pass 12000, the smaller ones after it still fit.
        assert_eq!(within_budget(4_608, &[2, 3, 4], tokens, 12_000), [3, 4]);
        assert_eq!(within_budget(4_608, &[1, 2, 3, 4], tokens, 20_000), [1, 2, 3]);
        // Nothing fits beside a step that fills the budget alone.
        assert!(within_budget(16_384, &[3], tokens, 16_384).is_empty());
    }
}
