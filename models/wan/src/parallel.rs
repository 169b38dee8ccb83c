//! The Wan transformer over several ranks (issue 18): guidance branches (batch rows) split across
//! CFG groups, and within a group the token sequence split across ranks (Ulysses, see
//! [`sequence_parallel`](crate::sequence_parallel)). The pipeline sees one [`Denoiser`]; the
//! engine's executor thread calls it exactly as the one-device transformer, so the scheduler,
//! guiders, samplers and cancellation are unchanged, and every unit is decided there once.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use fastvideo_parallel::{ParallelPlan, RankJob, RankPool};
use tch::{Device, Kind, Tensor};

use crate::sequence_parallel::split_counts;
use crate::transformer::{TransformerConfig, WanTransformer3DModel};
use crate::weights::{checkpoint_files, Weights};

/// The transformer's replicas (one per device; ranks on one device share it) and the rank
/// workers that run them.
pub struct ParallelTransformer {
    pool: Arc<RankPool>,
    replicas: Vec<Arc<WanTransformer3DModel>>,
}

impl ParallelTransformer {
    /// `first` is the loaded transformer (on rank 0's device); the other devices load the same
    /// checkpoint `files` in the same dtype.
    pub fn new(plan: ParallelPlan, devices: Vec<Device>, first: Arc<WanTransformer3DModel>, files: &[std::path::PathBuf], origin: &Path) -> Result<Self> {
        plan.check_heads(first.cfg.num_attention_heads)?;
        let replicas = replicas(&devices, first, files, origin)?;
        let pool = Arc::new(RankPool::new(plan, devices)?);
        Ok(Self { pool, replicas })
    }

    /// The same ranks with other weights (a weight update): the workers and their
    /// communicators are kept.
    pub fn with_weights(&self, first: Arc<WanTransformer3DModel>, files: &[std::path::PathBuf], origin: &Path) -> Result<Self> {
        Ok(Self { pool: Arc::clone(&self.pool), replicas: replicas(&self.pool.devices, first, files, origin)? })
    }

    pub fn plan(&self) -> ParallelPlan {
        self.pool.plan
    }

    pub fn devices(&self) -> &[Device] {
        &self.pool.devices
    }

    /// [`WanTransformer3DModel::forward`] over the ranks: rows split across the CFG groups,
    /// tokens across each group's ranks; the result lands on the device of `latents`.
    pub fn forward(&self, latents: &Tensor, timestep: &Tensor, context: &Tensor) -> Result<Tensor> {
        let plan = self.pool.plan;
        let home = latents.device();
        let rows = split_counts(latents.size()[0], plan.cfg as i64);
        let mut jobs: Vec<Option<RankJob>> = Vec::with_capacity(plan.ranks());
        let mut start = 0;
        for &n in &rows {
            let part = |t: &Tensor| t.narrow(0, start, n);
            for _ in 0..plan.sp {
                let rank = jobs.len();
                if n == 0 {
                    jobs.push(None);
                    continue;
                }
                let model = Arc::clone(&self.replicas[rank]);
                let (x, t, c) = (part(latents), part(timestep), part(context));
                let sp = plan.sp;
                jobs.push(Some(Box::new(move |ctx| {
                    let (x, t, c) = (x.to_device(ctx.device), t.to_device(ctx.device), c.to_device(ctx.device));
                    if sp == 1 {
                        model.forward(&x, &t, &c)
                    } else {
                        model.forward_rank(&x, &t, &c, Arc::clone(&ctx.comm))
                    }
                })));
            }
            start += n;
        }
        let mut outs = self.pool.run(jobs)?.into_iter();
        let mut start = 0;
        let mut groups = Vec::with_capacity(plan.cfg);
        for &n in &rows {
            let group: Vec<Tensor> = outs.by_ref().take(plan.sp).flatten().map(|t| t.to_device(home)).collect();
            if n > 0 {
                groups.push(if plan.sp == 1 {
                    group.into_iter().next().expect("one rank's output")
                } else {
                    self.replicas[0].unpatchify(&Tensor::cat(&group, 1), &latents.narrow(0, start, n))
                });
            }
            start += n;
        }
        Ok(Tensor::cat(&groups, 0))
    }
}

/// A replica per rank: `first` for ranks on its device, one load per other device.
fn replicas(
    devices: &[Device],
    first: Arc<WanTransformer3DModel>,
    files: &[std::path::PathBuf],
    origin: &Path,
) -> Result<Vec<Arc<WanTransformer3DModel>>> {
    let home = devices[0];
    let mut loaded: HashMap<Device, Arc<WanTransformer3DModel>> = HashMap::from([(home, first)]);
    let mut out = Vec::with_capacity(devices.len());
    for &d in devices {
        if !loaded.contains_key(&d) {
            let cfg = loaded[&home].cfg.clone();
            let t = load_on(cfg, files, origin, d, loaded[&home].kind())
                .with_context(|| format!("loading the transformer onto {d:?}"))?;
            loaded.insert(d, Arc::new(t));
        }
        out.push(Arc::clone(&loaded[&d]));
    }
    Ok(out)
}

fn load_on(cfg: TransformerConfig, files: &[std::path::PathBuf], origin: &Path, device: Device, kind: Kind) -> Result<WanTransformer3DModel> {
    let w = Weights::from_files(files, origin, device, kind)?;
    WanTransformer3DModel::new(cfg, &w)
}

/// The checkpoint files of a model folder's transformer (what the other ranks load).
pub fn transformer_checkpoint(model_dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    let dir = model_dir.join("transformer");
    if !dir.is_dir() {
        bail!("{}: no transformer folder", model_dir.display());
    }
    checkpoint_files(&dir, "diffusion_pytorch_model")
}
