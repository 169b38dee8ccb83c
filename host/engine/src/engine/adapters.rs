//! Merged adapters. The unmerged path lets requests with different adapter sets share a step,
//! at the cost of the low-rank GEMMs on every linear; when every started request runs with the
//! same set on the current weights, merging that set into the weights removes the cost. The
//! executor calls [`sync`] before each unit of work: it merges such a set, and restores the
//! weights (bit for bit, from the kept originals) as soon as a request with another set, or
//! none, is about to step.

use std::collections::HashMap;
use std::sync::Arc;

use fastvideo_pipeline::{AdapterSet, PipelineSpec};

use super::command::Job;
use crate::Metrics;

/// The set every started job (and `starting`, about to start) runs with on `spec`'s model, if
/// they all run one non-empty set there.
fn common_set<'a>(spec: &Arc<PipelineSpec>, jobs: &'a HashMap<u64, Job>, starting: u64) -> Option<&'a Arc<AdapterSet>> {
    let mut common: Option<&Arc<AdapterSet>> = None;
    for (k, job) in jobs {
        let started = job.run.as_ref();
        if started.is_none() && *k != starting {
            continue;
        }
        if started.is_some_and(|r| !Arc::ptr_eq(r.spec(), spec)) {
            return None;
        }
        let set = job.adapters.as_ref().filter(|s| !s.is_empty())?;
        match common {
            Some(c) if c.key() != set.key() => return None,
            _ => common = Some(set),
        }
    }
    common
}

/// Merges the common set into `spec`'s model, or unmerges when there is none. A failed merge
/// leaves the weights unmerged (the unmerged path is always correct).
pub(super) fn sync(spec: &Arc<PipelineSpec>, jobs: &HashMap<u64, Job>, starting: u64, metrics: &Metrics) {
    let Some(target) = spec.adapters.as_ref().filter(|t| t.can_merge()) else { return };
    let merged = target.merged();
    match common_set(spec, jobs, starting) {
        Some(set) if merged.as_deref() == Some(set.key()) => {}
        // A set the target runs only unmerged (bound to one loop of a two-stage recipe).
        Some(set) if !target.merges(set) && merged.is_some() => target.unmerge(),
        Some(set) if !target.merges(set) => {}
        Some(set) => {
            let t = std::time::Instant::now();
            match target.merge(set) {
                Ok(()) => {
                    metrics.adapter_merges.inc();
                    tracing::debug!(set = set.key(), seconds = t.elapsed().as_secs_f64(), "adapters merged");
                }
                Err(e) => {
                    target.unmerge();
                    tracing::warn!(error = %format!("{e:#}"), "merging adapters failed; running them unmerged");
                }
            }
        }
        None if merged.is_some() => {
            target.unmerge();
            tracing::debug!("adapters unmerged");
        }
        None => {}
    }
}
