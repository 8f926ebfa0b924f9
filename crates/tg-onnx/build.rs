//! Generates the ONNX protobuf types from the official `proto/onnx.proto` (onnx 1.16.2, as
//! shipped in its wheel) with `protox`, a pure-Rust protobuf compiler: no `protoc` needed.
//! `bytes` fields become `bytes::Bytes`, so decoding from a memory map keeps initializer
//! data in place.

fn main() {
    println!("cargo:rerun-if-changed=proto/onnx.proto");
    let fds = match protox::compile(["onnx.proto"], ["proto"]) {
        Ok(f) => f,
        Err(e) => panic!("compiling proto/onnx.proto: {e}"),
    };
    let mut cfg = prost_build::Config::new();
    cfg.bytes(["."]);
    if let Err(e) = cfg.compile_fds(fds) {
        panic!("generating the ONNX types: {e}");
    }
}
