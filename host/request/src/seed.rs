//! The seed a request gets when it names none.

/// A fresh seed from the clock and the process id, mixed so that requests arriving in the same
/// nanosecond tick of different processes still differ. Every front end draws with this one
/// function (it is reported in the output's metrics, so a run can be repeated).
pub fn random_seed() -> u64 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    (t as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ std::process::id() as u64
}
