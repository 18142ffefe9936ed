//! The reconcile cycle end to end on fakepve: creates, updates, renames, shards, HA, cloud-init.

mod cloudinit;
mod engine;
mod example_specs;
mod ha;
mod idle;
mod push_scope;
mod reboot;
mod renames;
mod shards;
