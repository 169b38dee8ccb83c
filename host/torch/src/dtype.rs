//! Compute dtypes: what a user asks for (`--dtype auto|bf16|fp16|fp32`) and what each model
//! component then runs in on a given device.

use std::fmt;
use std::str::FromStr;

use tch::{Device, Kind};

/// A requested compute dtype. `Auto` means the component's default for the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DtypeChoice {
    /// The component's default for the device ([`resolve`](Self::resolve)).
    #[default]
    Auto,
    /// bfloat16: float32's range at half the memory, the CUDA default.
    Bf16,
    /// IEEE half precision.
    Fp16,
    /// float32, the reference's numerics.
    Fp32,
}

impl DtypeChoice {
    /// The dtype for a component whose default is bf16 on CUDA and float32 elsewhere (CPUs have
    /// no fast bf16 matrix units here, and the reference runs them in float32).
    pub fn resolve(self, device: Device) -> Kind {
        self.resolve_or(device, Kind::BFloat16)
    }

    /// Like [`resolve`](Self::resolve) with the CUDA default given (e.g. a component whose
    /// measured best on the GPU is float32).
    pub fn resolve_or(self, device: Device, cuda_default: Kind) -> Kind {
        match self {
            DtypeChoice::Auto => match device {
                Device::Cuda(_) => cuda_default,
                _ => Kind::Float,
            },
            DtypeChoice::Bf16 => Kind::BFloat16,
            DtypeChoice::Fp16 => Kind::Half,
            DtypeChoice::Fp32 => Kind::Float,
        }
    }
}

impl FromStr for DtypeChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "bf16" | "bfloat16" => Ok(Self::Bf16),
            "fp16" | "f16" | "float16" | "half" => Ok(Self::Fp16),
            "fp32" | "f32" | "float32" | "float" => Ok(Self::Fp32),
            other => Err(format!("unknown dtype `{other}` (use auto, bf16, fp16 or fp32)")),
        }
    }
}

impl fmt::Display for DtypeChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::Bf16 => "bf16",
            Self::Fp16 => "fp16",
            Self::Fp32 => "fp32",
        })
    }
}

/// Short name of a dtype for logs and metrics.
pub fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::BFloat16 => "bf16",
        Kind::Half => "fp16",
        Kind::Float => "fp32",
        Kind::Double => "fp64",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_is_bf16_on_cuda_and_fp32_on_cpu() {
        assert_eq!(DtypeChoice::Auto.resolve(Device::Cuda(0)), Kind::BFloat16);
        assert_eq!(DtypeChoice::Auto.resolve(Device::Cpu), Kind::Float);
        assert_eq!(DtypeChoice::Auto.resolve_or(Device::Cuda(0), Kind::Float), Kind::Float);
        assert_eq!(DtypeChoice::Bf16.resolve(Device::Cpu), Kind::BFloat16);
        assert_eq!("FP16".parse::<DtypeChoice>().unwrap(), DtypeChoice::Fp16);
        let err = "int8".parse::<DtypeChoice>().unwrap_err();
        assert!(err.contains("unknown dtype `int8`"), "{err}");
        assert_eq!(DtypeChoice::Fp32.to_string(), "fp32");
    }
}
