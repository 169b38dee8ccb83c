//! How a model is split over ranks: `cfg` guidance-branch groups × `sp` sequence-parallel ranks
//! per group, from `--gpus N --parallel cfg|sp|cfg+sp`. Rank `r` is rank `r % sp` of group
//! `r / sp`; group 0's rank 0 is the engine's own device.

use std::str::FromStr;

use anyhow::{bail, Result};
use tch::Device;

/// `--parallel`: which dimension the GPUs split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParallelMode {
    /// The guidance branches on different GPUs.
    Cfg,
    /// The token sequence split across GPUs (Ulysses).
    Sp,
    /// Both: two branch groups, each splitting the sequence over half the GPUs.
    CfgSp,
}

impl FromStr for ParallelMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cfg" => Ok(Self::Cfg),
            "sp" => Ok(Self::Sp),
            "cfg+sp" | "sp+cfg" => Ok(Self::CfgSp),
            other => Err(format!("unknown parallel mode `{other}` (cfg, sp or cfg+sp)")),
        }
    }
}

impl std::fmt::Display for ParallelMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Cfg => "cfg",
            Self::Sp => "sp",
            Self::CfgSp => "cfg+sp",
        })
    }
}

/// The degrees of a parallel run. `ParallelPlan::single()` is today's one-device run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParallelPlan {
    /// Guidance-branch groups (1 or 2).
    pub cfg: usize,
    /// Ranks splitting the sequence within a group.
    pub sp: usize,
}

impl ParallelPlan {
    /// One device, no split: the plan of a plain run.
    pub fn single() -> Self {
        Self { cfg: 1, sp: 1 }
    }

    /// The plan for `--gpus gpus --parallel mode`; the error names the flag that is off.
    pub fn new(gpus: usize, mode: Option<ParallelMode>) -> Result<Self> {
        if gpus == 0 {
            bail!("--gpus must be at least 1");
        }
        let plan = match (gpus, mode) {
            (1, _) => Self::single(),
            (n, None) => bail!("--gpus {n} needs --parallel cfg, sp or cfg+sp (how the GPUs split a step)"),
            (2, Some(ParallelMode::Cfg)) => Self { cfg: 2, sp: 1 },
            (n, Some(ParallelMode::Cfg)) => {
                bail!("--parallel cfg uses 2 GPUs (one per guidance branch), not {n}; use cfg+sp for more")
            }
            (n, Some(ParallelMode::Sp)) => Self { cfg: 1, sp: n },
            (n, Some(ParallelMode::CfgSp)) if n % 2 == 0 => Self { cfg: 2, sp: n / 2 },
            (n, Some(ParallelMode::CfgSp)) => {
                bail!("--parallel cfg+sp needs an even --gpus (two guidance groups of equal size), not {n}")
            }
        };
        Ok(plan)
    }

    /// Ranks in all: guidance groups times sequence ranks, one per GPU.
    pub fn ranks(&self) -> usize {
        self.cfg * self.sp
    }

    /// Whether it is a one-rank run, which needs no workers or collectives.
    pub fn is_single(&self) -> bool {
        self.ranks() == 1
    }

    /// `(guidance group, rank within the group)` of rank `r`.
    pub fn position(&self, rank: usize) -> (usize, usize) {
        (rank / self.sp, rank % self.sp)
    }

    /// Refuses a sequence degree that does not divide the model's attention heads (each rank
    /// attends with `heads / sp` of them).
    pub fn check_heads(&self, heads: i64) -> Result<()> {
        if heads % self.sp as i64 != 0 {
            bail!(
                "--gpus/--parallel: a sequence-parallel degree of {} does not divide the model's {heads} attention heads \
                 (use a degree that does, e.g. {})",
                self.sp,
                divisors(heads).map(|d| d.to_string()).collect::<Vec<_>>().join(", ")
            );
        }
        Ok(())
    }

    /// The device of every rank: `cuda:0..N` from `first`'s ordinal, or every rank on `first`
    /// when `one_device` (a parallel plan checked on one GPU or the CPU: same arithmetic and
    /// exchanges, no speed-up). The error says how many GPUs there are.
    pub fn devices(&self, first: Device, cuda_devices: usize, one_device: bool) -> Result<Vec<Device>> {
        let n = self.ranks();
        if one_device || n == 1 {
            return Ok(vec![first; n]);
        }
        let Device::Cuda(base) = first else {
            bail!("--gpus {n}: ranks need CUDA devices but the model is on {first:?} (use --device cuda)");
        };
        if base + n > cuda_devices {
            bail!(
                "--gpus {n}: this machine has {cuda_devices} usable CUDA device(s){}",
                if base > 0 { format!(" and the first rank is cuda:{base}") } else { String::new() }
            );
        }
        Ok((base..base + n).map(Device::Cuda).collect())
    }
}

fn divisors(n: i64) -> impl Iterator<Item = i64> {
    (2..=n.min(16)).filter(move |d| n % d == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(gpus: usize, mode: Option<ParallelMode>) -> String {
        ParallelPlan::new(gpus, mode).unwrap_err().to_string()
    }

    #[test]
    fn modes_map_to_degrees() {
        assert_eq!(ParallelPlan::new(1, None).unwrap(), ParallelPlan::single());
        assert_eq!(ParallelPlan::new(2, Some(ParallelMode::Cfg)).unwrap(), ParallelPlan { cfg: 2, sp: 1 });
        assert_eq!(ParallelPlan::new(4, Some(ParallelMode::Sp)).unwrap(), ParallelPlan { cfg: 1, sp: 4 });
        let p = ParallelPlan::new(8, Some(ParallelMode::CfgSp)).unwrap();
        assert_eq!((p.cfg, p.sp, p.ranks()), (2, 4, 8));
        assert_eq!(p.position(5), (1, 1));
        assert_eq!("cfg+sp".parse::<ParallelMode>(), Ok(ParallelMode::CfgSp));
        assert!("tp".parse::<ParallelMode>().unwrap_err().contains("cfg, sp or cfg+sp"));
    }

    #[test]
    fn bad_combinations_name_the_flag() {
        assert!(err(0, None).contains("--gpus must be at least 1"));
        assert!(err(2, None).contains("needs --parallel"));
        assert!(err(4, Some(ParallelMode::Cfg)).contains("uses 2 GPUs"));
        assert!(err(3, Some(ParallelMode::CfgSp)).contains("even --gpus"));
    }

    #[test]
    fn heads_and_devices_are_checked() {
        let p = ParallelPlan::new(8, Some(ParallelMode::Sp)).unwrap();
        let e = p.check_heads(12).unwrap_err().to_string();
        assert!(e.contains("degree of 8") && e.contains("12 attention heads") && e.contains("2, 3, 4, 6"), "{e}");
        p.check_heads(40).unwrap();
        let e = p.devices(Device::Cuda(0), 1, false).unwrap_err().to_string();
        assert!(e.contains("--gpus 8: this machine has 1 usable CUDA device"), "{e}");
        assert!(p.devices(Device::Cpu, 0, false).unwrap_err().to_string().contains("need CUDA devices"));
        assert_eq!(p.devices(Device::Cpu, 0, true).unwrap(), vec![Device::Cpu; 8]);
        assert_eq!(p.devices(Device::Cuda(0), 8, false).unwrap()[7], Device::Cuda(7));
    }
}
