//! Helpers shared by the integration tests and the `bench` example.
#![allow(dead_code)]

pub mod planner;
