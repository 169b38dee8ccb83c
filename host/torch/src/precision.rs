//! Precision presets (`--precision exact|bf16|fast`): which numerics a deployment accepts, named
//! so that a lossy path is never taken silently. `exact` computes in float32 with no
//! approximation (the reference's numerics), `bf16` in bfloat16 as the GPU default does, and
//! `fast` adds the options that passed the quality gate in docs/benchmarks.md (today: the tiny
//! decoder for world sessions, where the folder has one). A lossy option that did not pass (FP8
//! linears, 8-bit attention) is an explicit flag of its own, never part of a preset. A run reports
//! what it ran.

use std::fmt;
use std::str::FromStr;

use tch::{Device, Kind};

use crate::DtypeChoice;

/// Whether `fast` includes 8-bit attention: set by its quality gate (docs/benchmarks.md).
pub const FAST_INT8_ATTENTION: bool = false;

/// A precision preset. `Auto` is the device's default: `bf16` on CUDA, `exact` elsewhere.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Precision {
    #[default]
    Auto,
    Exact,
    Bf16,
    Fast,
}

/// What a preset turns into for one load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Numerics {
    /// The preset, resolved (never `Auto`).
    pub preset: Precision,
    /// Transformer and text-encoder dtype.
    pub dtype: DtypeChoice,
    /// VAE dtype.
    pub vae_dtype: DtypeChoice,
    /// FP8 (e4m3) weights and per-token activations in the inner transformer blocks' linears
    /// (explicit: `--fp8-linears`).
    pub fp8_linears: bool,
    /// World sessions decode with the folder's tiny decoder, where it has one.
    pub tiny_decoder: bool,
    /// 8-bit self-attention (INT8 Q·Kᵀ, FP8 P·V) where the GPU has the kernel.
    pub int8_attention: bool,
}

impl Precision {
    /// The dtypes and options for `device`, with explicit `--dtype`/`--vae-dtype` choices
    /// (`Auto` where not given) applied on top. `exact` refuses a dtype other than float32;
    /// `Auto` keeps the dtypes as given and is named `exact` when they come to float32, else
    /// `bf16`.
    pub fn numerics(self, device: Device, dtype: DtypeChoice, vae_dtype: DtypeChoice) -> Result<Numerics, String> {
        if self == Precision::Auto {
            // Today's defaults, unchanged; named by what they compute in.
            let fp32 = dtype.resolve(device) == Kind::Float && vae_dtype.resolve(device) == Kind::Float;
            let preset = if fp32 { Precision::Exact } else { Precision::Bf16 };
            return Ok(Numerics {
                preset,
                dtype,
                vae_dtype,
                fp8_linears: false,
                tiny_decoder: false,
                int8_attention: false,
            });
        }
        let preset = self;
        let pick = |given: DtypeChoice, preset_default: DtypeChoice| match given {
            DtypeChoice::Auto => preset_default,
            d => d,
        };
        let n = match preset {
            Precision::Exact => {
                for (flag, d) in [("dtype", dtype), ("vae_dtype", vae_dtype)] {
                    if !matches!(d, DtypeChoice::Auto | DtypeChoice::Fp32) {
                        return Err(format!(
                            "{flag} = {d} with precision = exact, which computes in fp32; use precision = bf16 or \
                             fast for lower dtypes"
                        ));
                    }
                }
                Numerics {
                    preset,
                    dtype: DtypeChoice::Fp32,
                    vae_dtype: DtypeChoice::Fp32,
                    fp8_linears: false,
                    tiny_decoder: false,
                    int8_attention: false,
                }
            }
            // The VAE keeps its measured per-device default unless asked.
            Precision::Bf16 | Precision::Fast => Numerics {
                preset,
                dtype: pick(dtype, DtypeChoice::Bf16),
                vae_dtype,
                fp8_linears: false,
                tiny_decoder: preset == Precision::Fast,
                int8_attention: preset == Precision::Fast && FAST_INT8_ATTENTION,
            },
            Precision::Auto => unreachable!("returned above"),
        };
        Ok(n)
    }
}

impl Numerics {
    /// Adds the explicit FP8-linears option; refused with `exact`, which takes no lossy path.
    pub fn with_fp8_linears(mut self, on: bool) -> Result<Self, String> {
        if on && self.preset == Precision::Exact {
            return Err("fp8_linears with precision = exact, which takes no lossy path; use bf16 or fast".into());
        }
        self.fp8_linears |= on;
        Ok(self)
    }

    /// Adds the explicit 8-bit attention option; refused with `exact`.
    pub fn with_int8_attention(mut self, on: bool) -> Result<Self, String> {
        if on && self.preset == Precision::Exact {
            return Err("int8_attention with precision = exact, which takes no lossy path; use bf16 or fast".into());
        }
        self.int8_attention |= on;
        Ok(self)
    }

    /// The lossy paths a job takes beyond the dtype, by option name (then `exact` requests are
    /// refused).
    pub fn lossy_paths(&self) -> Vec<&'static str> {
        lossy_paths(self.fp8_linears, self.int8_attention)
    }

    /// The transformer's compute dtype on `device`.
    pub fn kind(&self, device: Device) -> Kind {
        self.dtype.resolve(device)
    }
}

/// The lossy options among those a load runs with, by option name.
pub fn lossy_paths(fp8_linears: bool, int8_attention: bool) -> Vec<&'static str> {
    [("fp8_linears", fp8_linears), ("int8_attention", int8_attention)]
        .into_iter()
        .filter_map(|(name, on)| on.then_some(name))
        .collect()
}

/// Those of `paths` that `preset` does not include: a server running any of them serves no
/// preset a request could name.
pub fn beyond_preset(preset: Precision, paths: &[&'static str]) -> Vec<&'static str> {
    let implied = |name: &str| preset == Precision::Fast && name == "int8_attention" && FAST_INT8_ATTENTION;
    paths.iter().copied().filter(|n| !implied(n)).collect()
}

impl FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "exact" => Ok(Self::Exact),
            "bf16" => Ok(Self::Bf16),
            "fast" => Ok(Self::Fast),
            other => Err(format!("unknown precision `{other}` (use auto, exact, bf16 or fast)")),
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::Exact => "exact",
            Self::Bf16 => "bf16",
            Self::Fast => "fast",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_keeps_todays_dtypes_and_names_them() {
        let a = DtypeChoice::Auto;
        assert_eq!(Precision::Auto.numerics(Device::Cuda(0), a, a).unwrap().preset, Precision::Bf16);
        assert_eq!(Precision::Auto.numerics(Device::Cpu, a, a).unwrap().preset, Precision::Exact);
        let cpu_bf16 = Precision::Auto.numerics(Device::Cpu, DtypeChoice::Bf16, a).unwrap();
        assert_eq!((cpu_bf16.preset, cpu_bf16.dtype), (Precision::Bf16, DtypeChoice::Bf16), "no error, no change");
    }

    #[test]
    fn presets_pick_dtypes_and_lossy_options() {
        let (a, cuda) = (DtypeChoice::Auto, Device::Cuda(0));
        let exact = Precision::Exact.numerics(cuda, a, a).unwrap();
        assert_eq!((exact.dtype, exact.vae_dtype, exact.fp8_linears), (DtypeChoice::Fp32, DtypeChoice::Fp32, false));
        let bf16 = Precision::Bf16.numerics(cuda, a, a).unwrap();
        assert_eq!((bf16.dtype, bf16.fp8_linears, bf16.tiny_decoder), (DtypeChoice::Bf16, false, false));
        let fast = Precision::Fast.numerics(cuda, DtypeChoice::Fp16, a).unwrap();
        assert_eq!((fast.dtype, fast.tiny_decoder), (DtypeChoice::Fp16, true), "an explicit dtype wins");
        // FP8 linears failed the eval gate: never part of a preset, only asked for by name.
        assert!(!fast.fp8_linears && fast.lossy_paths().is_empty() != FAST_INT8_ATTENTION);
        assert!(fast.with_fp8_linears(true).unwrap().lossy_paths().contains(&"fp8_linears"));
        assert_eq!(beyond_preset(Precision::Fast, &["fp8_linears"]), ["fp8_linears"]);
        assert_eq!(
            beyond_preset(Precision::Fast, &["int8_attention"]).is_empty(),
            FAST_INT8_ATTENTION,
            "fast includes 8-bit attention exactly when its gate says so"
        );
        assert_eq!(beyond_preset(Precision::Bf16, &["int8_attention"]), ["int8_attention"]);
        let bf16_int8 = Precision::Bf16.numerics(cuda, a, a).unwrap().with_int8_attention(true).unwrap();
        assert_eq!(bf16_int8.lossy_paths(), ["int8_attention"]);
        assert!(exact.with_int8_attention(true).unwrap_err().contains("exact"));
        assert!(exact.with_fp8_linears(true).unwrap_err().contains("exact"));
        // Today's default (no preset, no dtype) is unchanged.
        let auto = Precision::Auto.numerics(Device::Cpu, a, a).unwrap();
        assert_eq!((auto.preset, auto.kind(Device::Cpu)), (Precision::Exact, Kind::Float));
    }

    #[test]
    fn exact_refuses_a_lower_dtype_naming_the_field() {
        let err = Precision::Exact.numerics(Device::Cpu, DtypeChoice::Auto, DtypeChoice::Bf16).unwrap_err();
        assert!(err.contains("vae_dtype") && err.contains("exact"), "{err}");
    }

    #[test]
    fn presets_parse_and_print() {
        for p in [Precision::Auto, Precision::Exact, Precision::Bf16, Precision::Fast] {
            assert_eq!(p.to_string().parse::<Precision>(), Ok(p));
        }
        assert!("fp8".parse::<Precision>().unwrap_err().contains("exact, bf16 or fast"));
    }
}
