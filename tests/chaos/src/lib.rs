//! The chaos suite's harness: a real kube-apiserver (its own ccm-testenv
//! per scenario, so Nodes and Services of one scenario never meet
//! another's controller), the real `cloud-controller-manager` and
//! `fake-provider` binaries as processes (kill -9 and SIGSTOP need
//! processes), and the counts every scenario ends with (see [`count`]).
//! [`hybrid`] is the setup with two providers (the local one too).
//!
//! `CHAOS_SCALE` (1 to 20, default 1) multiplies the work and the faults of
//! every scenario: 1 is the short form `make test` runs, `make chaos` runs
//! a larger one. `CHAOS_SEED` replays the timing choices of an earlier run
//! (each scenario prints its seed).
//!
//! A failing scenario keeps its directory under `target/chaos/` (named in
//! the failure): every process's log with the faults inflicted on it
//! (`=== chaos` lines), the test's own actions on each cluster
//! (`<cluster>-actions.log`) and the fake's state file. For more,
//! `CHAOS_RUST_LOG` sets the processes' `RUST_LOG` (default `info`), and
//! `CHAOS_CALLS=1` saves the fake's call log before each kill -9
//! (`fake-provider.calls`).

pub mod cluster;
pub mod count;
pub mod hybrid;
pub mod process;

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ccm_fake_provider::LoadBalancer;
use ccm_provider_sdk::proto::{NodeRef, Service as ProtoService};
use ccm_provider_sdk::{ClientOptions, ProviderClient};

use ccm_testsupport::steady::kubelet_ready;
pub use cluster::{CONTROLLER_USER, Cluster};
pub use count::Tally;
pub use process::{Controller, Provider};

/// The cluster name of the load balancers every scenario seeds in the
/// fake before its controller starts: no controller may touch them.
pub const FOREIGN_CLUSTER: &str = "chaos-foreign";
/// How long the system gets to converge after the faults stop.
pub const SETTLE: Duration = Duration::from_secs(120);

/// `CHAOS_SCALE`: how much work and how many faults; 1 by default.
pub fn scale() -> usize {
    match std::env::var("CHAOS_SCALE") {
        Err(_) => 1,
        Ok(s) => match s.parse::<usize>() {
            Ok(n) if (1..=20).contains(&n) => n,
            _ => panic!("CHAOS_SCALE={s:?}: expected a number from 1 to 20"),
        },
    }
}

/// A small deterministic generator (xorshift64*) for the timing of faults:
/// printed seed in, same choices out.
pub struct Rng(u64);

impl Rng {
    /// Seeded from `CHAOS_SEED`, else from the clock.
    pub fn seeded() -> (Rng, u64) {
        let seed = match std::env::var("CHAOS_SEED") {
            Ok(s) => s
                .parse()
                .unwrap_or_else(|_| panic!("CHAOS_SEED={s:?}: expected a number")),
            Err(_) => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1),
        };
        (Rng(seed.max(1)), seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// An independent generator for a concurrent task.
    pub fn fork(&mut self) -> Rng {
        Rng(self.next_u64().max(1))
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    /// A duration from `lo` to `hi` milliseconds.
    pub fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.next_u64() % (hi - lo + 1))
    }
}

/// Where a scenario keeps its files: sockets and the apiserver's data in a
/// short temporary directory (socket paths are limited to 107 bytes),
/// logs and the fake's state file under `target/chaos/`, kept when the
/// scenario fails.
pub struct RunDir {
    pub tmp: tempfile::TempDir,
    pub logs: PathBuf,
}

impl RunDir {
    pub fn new(scenario: &str) -> RunDir {
        let logs = ccm_testsupport::target_dir()
            .join("chaos")
            .join(ccm_testsupport::unique_name(scenario));
        std::fs::create_dir_all(&logs).unwrap();
        RunDir {
            tmp: tempfile::Builder::new().prefix("chaos").tempdir().unwrap(),
            logs,
        }
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.logs);
        }
    }
}

/// A Service of another cluster as the provider sees it.
fn foreign_service(ns: &str, name: &str, uid: &str) -> ProtoService {
    ccm_testsupport::proto_service(ns, name, uid)
}

/// Creates load balancers of [`FOREIGN_CLUSTER`] in the fake, one per
/// (namespace, name): the same names the scenario's own Services use, so a
/// controller that confused the two would show.
pub async fn seed_foreign(provider: &Provider, names: &[(&str, &str)]) {
    let client =
        ProviderClient::connect_lazy(&provider.endpoint, ClientOptions::default()).unwrap();
    for (i, (ns, name)) in names.iter().enumerate() {
        let node = NodeRef {
            name: format!("foreign-node-{i}"),
            ..Default::default()
        };
        client
            .ensure_load_balancer(
                FOREIGN_CLUSTER,
                foreign_service(ns, name, &format!("foreign-uid-{i}")),
                vec![node],
            )
            .await
            .unwrap();
    }
}

/// The common single-cluster setup: an apiserver, the fake provider (state
/// file; foreign load balancers seeded) and one controller of cluster
/// [`World::CLUSTER`].
pub struct World {
    pub tally: Tally,
    pub rng: Rng,
    pub scale: usize,
    pub controller: Controller,
    pub provider: Provider,
    pub cluster: Cluster,
    foreign_before: Vec<LoadBalancer>,
    pub run: RunDir,
}

impl World {
    pub const CLUSTER: &'static str = "chaos";
    /// The namespace the scenario's Services live in.
    pub const NS: &'static str = "apps";

    pub async fn new(scenario: &str, provider_flags: &[&str], controller_flags: &[&str]) -> World {
        let run = RunDir::new(scenario);
        let (rng, seed) = Rng::seeded();
        let mut tally = Tally::new(scenario);
        tally.extra("seed", seed);
        let cluster =
            Cluster::start(Self::CLUSTER, run.tmp.path().join("apiserver"), &run.logs).await;
        cluster.namespace(Self::NS).await;
        let provider = Provider::start(run.tmp.path(), &run.logs, provider_flags).await;
        seed_foreign(
            &provider,
            &[(Self::NS, "svc-0"), (Self::NS, "svc-1"), ("other", "web")],
        )
        .await;
        let foreign_before = count::foreign(&provider.state().await, &[Self::CLUSTER]);
        let controller = Controller::start(
            "controller",
            &cluster.kubeconfig,
            &provider.endpoint,
            Self::CLUSTER,
            run.logs.join("controller.log"),
            controller_flags,
        );
        World {
            tally,
            rng,
            scale: scale(),
            controller,
            provider,
            cluster,
            foreign_before,
            run,
        }
    }

    /// Where the logs are, for failure messages.
    pub fn logs(&self) -> String {
        self.run.logs.display().to_string()
    }

    /// The end of every scenario: the system converges (or the deadline
    /// passes), every Service is deleted and must take its load balancer
    /// with it, `nodes` (the Nodes the scenario registered) are checked
    /// for wrongful deletions and the foreign load balancers for changes;
    /// then the line is printed and every count must be 0.
    pub async fn finish(mut self, nodes: &[String]) {
        self.controller.assert_running();
        // The kubelets are up: every Node posts Ready, so the quiet window
        // below only renews it.
        for n in self.cluster.all_nodes().await {
            let name = n.metadata.name.unwrap_or_default();
            kubelet_ready(&self.cluster.admin, &name)
                .await
                .unwrap_or_else(|e| panic!("posting Ready for {name}: {e}"));
        }
        let (c, took) = count::settle(&self.cluster, &self.provider, SETTLE).await;
        self.tally.census("converged", &c);
        self.tally.extra("settled_ms", took.as_millis());
        let wrong = count::wrongly_deleted(&self.cluster, &self.provider, nodes).await;
        self.tally.wrongly_deleted(&wrong);
        let q = count::quiet(
            &self.cluster,
            &self.provider,
            &self.controller.proc.log,
            CONTROLLER_USER,
            SETTLE,
        )
        .await;
        self.tally.quiet(&q);
        let c = count::teardown(&self.cluster, &self.provider, SETTLE).await;
        self.tally.census("teardown", &c);
        let after = count::foreign(&self.provider.state().await, &[Self::CLUSTER]);
        self.tally
            .foreign(&count::touched(&self.foreign_before, &after));
        self.controller.assert_running();
        self.tally.finish(&self.logs());
    }
}
