//! cargo-fuzz target: the GGUF parser must never panic, and a file it accepts must be
//! usable (tensor slices in bounds, supported types dequantize).
//!
//! Run: `cargo +nightly fuzz run gguf_parse -- -max_total_time=60`
//! (seed corpus: `TG_FUZZ_WRITE_SEEDS=fuzz/corpus/gguf_parse cargo test -p tg-gguf --test mutation_fuzz`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tg_gguf::GgufFile;

fuzz_target!(|data: &[u8]| {
    if GgufFile::validate(data).is_err() {
        return;
    }
    let f = GgufFile::from_bytes(data.to_vec()).expect("validate and from_bytes agree");
    for (k, _) in f.metadata() {
        let _ = (
            f.get_u32(k),
            f.get_f32(k),
            f.get_str(k),
            f.get_str_array(k),
            f.get_i32_array(k),
        );
    }
    for t in f.tensors() {
        let bytes = f.tensor_bytes(t);
        assert_eq!(bytes.len(), t.n_bytes);
        if t.n_elements() <= 1 << 16 && tg_quant::can_dequantize(t.ty) {
            let mut out = vec![0f32; t.n_elements() as usize];
            tg_quant::dequantize_row(t.ty, bytes, &mut out).expect("validated tensor dequantizes");
        }
    }
});
