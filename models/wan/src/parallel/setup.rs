//! Setting a loaded model up for `--gpus N --parallel …`.

use anyhow::Result;
use fastvideo_parallel::ParallelPlan;

use crate::loader::WanModel;

/// Sets `model` up for `--gpus gpus --parallel mode`: checks the plan against the machine's
/// GPUs and the model's heads, then loads the other ranks' replicas. Rank 0 is the model's
/// device; the others follow it (`cuda:1`, `cuda:2`, …). With `FASTVIDEO_PARALLEL_ONE_DEVICE=1`
/// every rank runs on the model's device: the same arithmetic and exchanges, to check a layout
/// (or measure its overhead) on one GPU or the CPU.
pub fn setup(model: &mut WanModel, gpus: usize, mode: Option<fastvideo_parallel::ParallelMode>) -> Result<()> {
    let plan = ParallelPlan::new(gpus, mode)?;
    if plan.is_single() {
        return Ok(());
    }
    anyhow::ensure!(
        !model.load_report.fp8_linears,
        "fp8_linears runs on one GPU for now; drop it to split over --gpus {gpus}"
    );
    let one_device = std::env::var_os("FASTVIDEO_PARALLEL_ONE_DEVICE").is_some_and(|v| v != "0");
    let devices = plan.devices(model.device, fastvideo_torch::init().cuda_devices, one_device)?;
    model.parallelize(plan, devices)
}
