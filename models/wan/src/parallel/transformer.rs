//! [`ParallelTransformer`]: one transformer replica per device, run by the rank workers, and
//! loading the replicas from a checkpoint.

use std::collections::hash_map::{Entry, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use fastvideo_layers::sequence_parallel::split_counts;
use fastvideo_parallel::{ParallelPlan, RankJob, RankPool};
use tch::{Device, Tensor};

use crate::transformer::WanTransformer3DModel;
use crate::weights::{checkpoint_files, Weights};

/// The transformer's replicas (one per device; ranks on one device share it) and the rank
/// workers that run them.
pub struct ParallelTransformer {
    pool: Arc<RankPool>,
    replicas: Vec<Arc<WanTransformer3DModel>>,
}

impl ParallelTransformer {
    /// `first` is the loaded transformer (on rank 0's device); `load` makes the same
    /// transformer on each other device (once per device: ranks on one device share it).
    pub fn new(
        plan: ParallelPlan,
        devices: Vec<Device>,
        first: Arc<WanTransformer3DModel>,
        load: &LoadOn<'_>,
    ) -> Result<Self> {
        plan.check_heads(first.cfg.num_attention_heads)?;
        let replicas = replicas(&devices, first, load)?;
        let pool = Arc::new(RankPool::new(plan, devices)?);
        Ok(Self { pool, replicas })
    }

    /// The same ranks with other weights (a weight update): the workers and their
    /// communicators are kept.
    pub fn with_weights(&self, first: Arc<WanTransformer3DModel>, load: &LoadOn<'_>) -> Result<Self> {
        Ok(Self { pool: Arc::clone(&self.pool), replicas: replicas(&self.pool.devices, first, load)? })
    }

    /// The degrees the ranks split a step by.
    pub fn plan(&self) -> ParallelPlan {
        self.pool.plan
    }

    /// Each rank's device, rank 0 first.
    pub fn devices(&self) -> &[Device] {
        &self.pool.devices
    }

    /// How the ranks of a group exchange tensors.
    pub fn transport(&self) -> fastvideo_parallel::pool::Transport {
        self.pool.transport
    }

    /// [`WanTransformer3DModel::forward`] over the ranks: rows split across the CFG groups,
    /// tokens across each group's ranks; the result lands on the device of `latents`.
    pub fn forward(
        &self,
        latents: &Tensor,
        timestep: &Tensor,
        context: &Tensor,
        image: Option<&Tensor>,
    ) -> Result<Tensor> {
        let plan = self.pool.plan;
        let home = latents.device();
        anyhow::ensure!(latents.size().first().is_some_and(|&b| b > 0), "transformer: no rows to run");
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
                // A FLF2V sample has two pictures' rows: the image rows split in proportion.
                let img = image.map(|i| {
                    let per = i.size()[0] / latents.size()[0];
                    i.narrow(0, start * per, n * per)
                });
                let sp = plan.sp;
                jobs.push(Some(Box::new(move |ctx| {
                    let (x, t, c) = (x.to_device(ctx.device), t.to_device(ctx.device), c.to_device(ctx.device));
                    let img = img.map(|i| i.to_device(ctx.device));
                    if sp == 1 {
                        model.forward_hooked(&x, &t, &c, img.as_ref(), None)
                    } else {
                        model.forward_rank(&x, &t, &c, img.as_ref(), Arc::clone(&ctx.comm))
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

/// Makes the transformer on a device (another rank's replica).
pub type LoadOn<'a> = dyn Fn(Device) -> Result<Arc<WanTransformer3DModel>> + 'a;

/// A replica per rank: `first` for ranks on its device, one load per other device.
fn replicas(
    devices: &[Device],
    first: Arc<WanTransformer3DModel>,
    load: &LoadOn<'_>,
) -> Result<Vec<Arc<WanTransformer3DModel>>> {
    let mut loaded: HashMap<Device, Arc<WanTransformer3DModel>> = HashMap::from([(devices[0], first)]);
    let mut out = Vec::with_capacity(devices.len());
    for &d in devices {
        let t = match loaded.entry(d) {
            Entry::Occupied(e) => Arc::clone(e.get()),
            Entry::Vacant(e) => {
                Arc::clone(e.insert(load(d).with_context(|| format!("loading the transformer onto {d:?}"))?))
            }
        };
        out.push(t);
    }
    Ok(out)
}

/// [`LoadOn`] for a checkpoint's files: the same config and dtype as `like`.
pub fn load_from_files(
    like: &WanTransformer3DModel,
    files: Vec<PathBuf>,
    origin: PathBuf,
) -> impl Fn(Device) -> Result<Arc<WanTransformer3DModel>> {
    let (cfg, kind) = (like.cfg.clone(), like.kind());
    move |device| {
        Ok(Arc::new(WanTransformer3DModel::new(cfg.clone(), &Weights::from_files(&files, &origin, device, kind)?)?))
    }
}

/// The checkpoint files of a model folder's transformer (what the other ranks load).
pub fn transformer_checkpoint(model_dir: &Path) -> Result<Vec<PathBuf>> {
    let dir = model_dir.join("transformer");
    if !dir.is_dir() {
        bail!("{}: no transformer folder", model_dir.display());
    }
    checkpoint_files(&dir, "diffusion_pytorch_model")
}
