//! Program building: the kernel program builds; a syntax error reports the build log.

mod common;

#[test]
fn kernel_program_builds() {
    let Some(_env) = common::env() else { return };
}

#[test]
fn syntax_error_returns_the_build_log() {
    // The shared context: PoCL 3.1 was seen to fail a concurrent clCreateBuffer
    // (CL_INVALID_BUFFER_SIZE) while another thread created a second context.
    let Some(env) = common::env() else { return };
    let (device, context) = (&env.device, &env.context);
    let src = "__kernel void broken(__global float* x) { x[0] = 1.0f +; }";
    match tg_opencl::build_program(context, device, "broken_program", &[src], "") {
        Ok(_) => panic!("a program with a syntax error built"),
        Err(e) => {
            let msg = e.to_string();
            eprintln!("{msg}");
            assert!(msg.contains("broken_program"), "the error names the program: {msg}");
            assert!(matches!(&e, tg_opencl::ClError::Build { log, .. } if !log.trim().is_empty()), "the error carries the build log: {msg}");
            assert!(msg.contains("error"), "the build log shows the compiler's error: {msg}");
        }
    }
}
