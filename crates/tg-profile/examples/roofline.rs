//! Measures and prints this machine's roofline at 1 and 2 threads (or the thread counts
//! given as arguments), with the fingerprint: `cargo run --release -p tg-profile --example roofline [threads..]`.

use tg_profile::{measure_roofline, Fingerprint, RooflineOptions};
use tg_runtime::CpuDevice;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let fp = Fingerprint::current();
    println!("fingerprint {} {}", fp.id(), serde_json::to_string(&fp)?);
    let threads: Vec<usize> = std::env::args().skip(1).map(|a| a.parse()).collect::<Result<_, _>>()?;
    let opts = RooflineOptions::default();
    println!("stream {} f32 elements per array, matmul {}^3", opts.stream_elems, opts.matmul_dim);
    for t in if threads.is_empty() { vec![1, 2] } else { threads } {
        let dev = CpuDevice::new(t)?;
        let r = measure_roofline(&dev, t, &opts)?;
        println!("threads {t}: launch {:.0} ns, bandwidth {:.2} GB/s, peak {:.1} GFLOP/s", r.launch_ns, r.bytes_per_ns, r.flops_per_ns);
    }
    Ok(())
}
