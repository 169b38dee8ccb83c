//! Seeded Gaussian noise: the starting latents and the stochastic sampler steps draw from it.
//! Its own module so the denoise loop and the samplers both use it without needing each other.

use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};
use tch::{Device, Tensor};

/// Standard-normal noise from a seed, generated on the host with ChaCha so the same seed gives
/// the same video on every device and is independent of libtorch's global generator (which
/// concurrent requests would otherwise share).
pub fn seeded_noise(shape: &[i64], seed: u64, device: Device) -> Tensor {
    let n: i64 = shape.iter().product();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let data: Vec<f32> = (0..n).map(|_| StandardNormal.sample(&mut rng)).collect();
    Tensor::from_slice(&data).reshape(shape).to_device(device)
}
