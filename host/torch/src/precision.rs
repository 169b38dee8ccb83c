//! Precision presets (`--precision exact|bf16|fast`): which numerics a deployment accepts, named
//! so that a lossy path is never taken silently. `exact` computes in float32 with no
//! approximation (the reference's numerics), `bf16` in bfloat16 as the GPU default does, and
//! `fast` adds the options that passed the quality gate in docs/benchmarks.md for that model:
//! each model family says what (`fastvideo_family::Family::implies`), so this module knows only
//! the dtypes. A lossy option that did not pass (FP8 linears) is an explicit flag of its own,
//! never part of a preset. A run reports what it ran.

use std::fmt;
use std::str::FromStr;

use tch::{Device, Kind};

use crate::DtypeChoice;

/// The 8-bit attention recipes: Q·Kᵀ in INT8 (K smoothed) either way; they differ in P·V.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Int8Attention {
    /// P and V in e4m3 (SageAttention2's recipe, `--int8-attention`): P·V at twice the bf16
    /// rate, P and V each rounded to 3 mantissa bits.
    Fp8Pv,
    /// P and V in f16 (`--int8-qk-attention`): P·V at the bf16 rate with 10 mantissa bits, so
    /// only the INT8 logits approximate.
    F16Pv,
}

impl Int8Attention {
    /// The option's name, as configs, flags (with dashes) and reports spell it.
    pub fn name(self) -> &'static str {
        match self {
            Int8Attention::Fp8Pv => "int8_attention",
            Int8Attention::F16Pv => "int8_qk_attention",
        }
    }
}

/// A precision preset. `Auto` is the device's default: `bf16` on CUDA, `exact` elsewhere.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Precision {
    /// The device's default: `bf16` on CUDA, `exact` elsewhere.
    #[default]
    Auto,
    /// float32 with no approximation: the reference's numerics.
    Exact,
    /// bfloat16 compute, as the GPU default does, and no other lossy option.
    Bf16,
    /// `bf16` plus the options that passed the quality gate for the model's family.
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
    /// 8-bit self-attention (INT8 Q·Kᵀ; P·V as the recipe says) where the GPU has the kernel.
    pub int8_attention: Option<Int8Attention>,
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
                int8_attention: None,
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
                    int8_attention: None,
                }
            }
            // The VAE keeps its measured per-device default unless asked. What `fast` adds beyond
            // bf16 is the model family's to say.
            Precision::Bf16 | Precision::Fast => Numerics {
                preset,
                dtype: pick(dtype, DtypeChoice::Bf16),
                vae_dtype,
                fp8_linears: false,
                tiny_decoder: false,
                int8_attention: None,
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

    /// Adds an explicit 8-bit attention recipe (it replaces the preset's); refused with `exact`.
    pub fn with_int8_attention(mut self, recipe: Option<Int8Attention>) -> Result<Self, String> {
        if let Some(r) = recipe {
            if self.preset == Precision::Exact {
                return Err(format!(
                    "{} with precision = exact, which takes no lossy path; use bf16 or fast",
                    r.name()
                ));
            }
            self.int8_attention = Some(r);
        }
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
pub fn lossy_paths(fp8_linears: bool, int8_attention: Option<Int8Attention>) -> Vec<&'static str> {
    fp8_linears.then_some("fp8_linears").into_iter().chain(int8_attention.map(Int8Attention::name)).collect()
}

/// Those of `paths` that `preset` does not include: a server running any of them serves no
/// preset a request could name. `fast` includes either 8-bit attention recipe (each passed the
/// generation and the world gates; a family picks one by default).
pub fn beyond_preset(preset: Precision, paths: &[&'static str]) -> Vec<&'static str> {
    let gated = [Int8Attention::Fp8Pv, Int8Attention::F16Pv];
    let implied = |name: &str| preset == Precision::Fast && gated.iter().any(|r| r.name() == name);
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
        assert_eq!(fast.dtype, DtypeChoice::Fp16, "an explicit dtype wins");
        // The preset alone adds no lossy path: the family adds what its gate admitted.
        assert!(!fast.fp8_linears && !fast.tiny_decoder && fast.int8_attention.is_none());
        // FP8 linears failed the eval gate: never part of a preset, only asked for by name.
        assert!(fast.with_fp8_linears(true).unwrap().lossy_paths().contains(&"fp8_linears"));
        assert_eq!(beyond_preset(Precision::Fast, &["fp8_linears"]), ["fp8_linears"]);
        for recipe in [Int8Attention::Fp8Pv, Int8Attention::F16Pv] {
            assert!(
                beyond_preset(Precision::Fast, &[recipe.name()]).is_empty(),
                "fast includes either 8-bit attention recipe: each passed both gates"
            );
            assert_eq!(beyond_preset(Precision::Bf16, &[recipe.name()]), [recipe.name()]);
            let bf16_int8 = Precision::Bf16.numerics(cuda, a, a).unwrap().with_int8_attention(Some(recipe)).unwrap();
            assert_eq!(bf16_int8.lossy_paths(), [recipe.name()]);
            assert!(exact.with_int8_attention(Some(recipe)).unwrap_err().contains(recipe.name()));
        }
        assert_eq!(exact.with_int8_attention(None).unwrap(), exact);
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
