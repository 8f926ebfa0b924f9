//! Weights are bound once per device: binding the same store and name again (another plan,
//! another run) returns the buffer already there; the CPU reads them in place.

use std::collections::HashMap;
use std::sync::Arc;
use tg_ir::WeightStore;

mod common;

#[test]
fn a_weight_is_uploaded_once_per_device_and_store() {
    let mut m = HashMap::new();
    m.insert("w".to_string(), (0..64u8).collect::<Vec<u8>>());
    let store: Arc<dyn WeightStore + Send + Sync> = Arc::new(m.clone());
    let other: Arc<dyn WeightStore + Send + Sync> = Arc::new(m);
    for name in ["cpu", "opencl"] {
        let Some(dev) = common::open_or_skip(name) else { continue };
        let a = dev.bind_weight(&store, "w").unwrap();
        let mut back = vec![0u8; 64];
        dev.read(&a, 0, &mut back).unwrap();
        assert_eq!(back, (0..64u8).collect::<Vec<u8>>(), "{name}: the weight's bytes");
        if dev.kind() != tg_runtime::DeviceKind::Cpu {
            let b = dev.bind_weight(&store, "w").unwrap();
            assert!(Arc::ptr_eq(&a, &b), "{name}: the same store and name bound twice made two buffers");
            let c = dev.bind_weight(&other, "w").unwrap();
            assert!(!Arc::ptr_eq(&a, &c), "{name}: another store shares the first store's buffer");
        }
        assert!(dev.bind_weight(&store, "missing").is_err(), "{name}: a missing weight binds");
        assert!(dev.write(&a, 0, &[1]).is_err() || dev.kind() != tg_runtime::DeviceKind::Cpu, "{name}: the CPU writes into a weight");
    }
}

/// Events: a point recorded on a queue can be waited for, on every device present.
#[test]
fn events_record_and_wait() {
    for name in ["cpu", "opencl"] {
        let Some(dev) = common::open_or_skip(name) else { continue };
        assert!(dev.queues() >= 1);
        let b = dev.alloc(256).unwrap();
        dev.fill(&b, 0, 256, 7).unwrap();
        let e = dev.record(0).unwrap();
        dev.wait(0, &e).unwrap();
        dev.fill(&b, 128, 128, 9).unwrap();
        dev.synchronize().unwrap();
        let mut back = vec![0u8; 256];
        dev.read(&b, 0, &mut back).unwrap();
        assert!(back[..128].iter().all(|&x| x == 7) && back[128..].iter().all(|&x| x == 9), "{name}");
    }
}
