//! The end-to-end tests: one test binary against one real kube-apiserver
//! (started on first use, see `ccm_testsupport`), a module per area.
//!
//! Run one area with a filter on its module path, for example
//! `cargo test -p ccm-e2e --test e2e -- service_lb::`.
//!
//! Every test reaches the control plane through [`common::ControlPlane`] (or
//! a [`common::Harness`], which holds one): an exclusive hold for a test that
//! runs a controller or creates what controllers act on (Nodes, Services of
//! type LoadBalancer, PersistentVolumes), a shared one for the others. So no
//! test can forget the lock, and each exclusive holder deletes, when it is
//! done, the Nodes, Services and PersistentVolumes created while it held the
//! control plane, and nothing else.
//!
//! No test needs a process of its own: the controller's logs go to one
//! `try_init` subscriber, and nothing sets environment variables or takes
//! fixed ports.

mod common;

mod batching;
mod call_budget;
mod capabilities;
mod control_plane;
mod deploy_manifests;
mod harness;
mod helm_chart;
mod hybrid;
mod hybrid_core;
mod kube_client;
mod leader_election;
mod local_provider;
mod node_controllers;
mod node_routes;
mod node_watch_protobuf;
mod other_providers;
mod provider_access;
mod provider_answers;
mod pv_labels;
mod real_ccm;
mod secure_serving;
mod service_lb;
mod shadow_mode;
mod steady_state;
mod supervision;
mod testenv_lifecycle;
mod tracing_export;
mod upstream_handoff;
