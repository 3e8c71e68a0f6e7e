//! What a provider can make the client hold, wait for and follow is bounded
//! (issue 25, findings 3, 5 and 8), against a provider written on the raw
//! generated traits (the SDK's server would refuse to send these answers):
//! a listing whose tokens never end fails within its page and time budget,
//! a huge error trailer fails its own call and no other, a huge
//! `InstanceMetadata` answer is refused at once without stalling the
//! runtime.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ccm_provider_sdk::proto::*;
use ccm_provider_sdk::{ClientError, ClientOptions, Existence, ProviderClient, bind_socket};
use ccm_testsupport::raw::{ListingOnly, RawIdentity, RawListing};
use prost::Message;
use tokio::sync::watch;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

/// A provider that breaks every bound it can. Node names choose the
/// answer: `held-*` waits for `release`, `huge-error-<bytes>` fails with an
/// error text of that many bytes, `huge` gets ~15 MB of metadata,
/// `addresses-<n>` and `labels-<n>` that many addresses or labels.
#[derive(Clone)]
struct Hostile {
    list_calls: Arc<AtomicUsize>,
    deletes: Arc<AtomicUsize>,
    /// Seconds each list page takes.
    page_delay: Duration,
    held: watch::Sender<usize>,
    release: watch::Receiver<bool>,
    /// Built only in the provider process that serves it.
    huge: Option<Arc<InstanceMetadata>>,
}

/// ~15.5 MB of valid metadata (within the contract's 16 MiB message
/// bound): 890,000 InternalIP addresses.
fn huge_metadata() -> InstanceMetadata {
    InstanceMetadata {
        provider_id: "hostile://i-1".into(),
        node_addresses: addresses(890_000),
        ..Default::default()
    }
}

/// Pages of a ~15 MB listing: 300 pages of the 500 load balancers the
/// client asks for at most, 150,000 in all.
const HUGE_PAGES: usize = 300;
const PAGE: usize = 500;

fn huge_listing_page(page: usize) -> ListLoadBalancersResponse {
    ListLoadBalancersResponse {
        load_balancers: (page * PAGE..(page + 1) * PAGE)
            .map(|i| LoadBalancerSummary {
                name: format!("a{i:031}"),
                service_uid: format!("{i:08}-0000-4000-8000-000000000000"),
                service_namespace: "default".into(),
                service_name: format!("service-{i:07}"),
                status: None,
            })
            .collect(),
        next_page_token: if page + 1 < HUGE_PAGES {
            (page + 1).to_string()
        } else {
            String::new()
        },
    }
}

fn addresses(n: usize) -> Vec<NodeAddress> {
    (0..n)
        .map(|i| NodeAddress {
            r#type: NodeAddressType::InternalIp as i32,
            address: format!("10.{}.{}.{}", i >> 16 & 255, i >> 8 & 255, i & 255),
        })
        .collect()
}

#[tonic::async_trait]
impl instances_service_server::InstancesService for Hostile {
    /// Not announced (no CAPABILITY_INSTANCES_BATCH).
    async fn batch_instances(
        &self,
        _: Request<ccm_provider_sdk::proto::BatchInstancesRequest>,
    ) -> Result<Response<ccm_provider_sdk::proto::BatchInstancesResponse>, Status> {
        Err(Status::unimplemented("BatchInstances"))
    }

    async fn instance_exists(
        &self,
        r: Request<InstanceExistsRequest>,
    ) -> Result<Response<InstanceExistsResponse>, Status> {
        let name = r.into_inner().node.unwrap_or_default().name;
        if let Some(bytes) = name.strip_prefix("huge-error-") {
            let bytes: usize = bytes.parse().unwrap();
            return Err(Status::invalid_argument("x".repeat(bytes)));
        }
        if name.starts_with("held-") {
            self.held.send_modify(|n| *n += 1);
            let _ = self.release.clone().wait_for(|r| *r).await;
        }
        Ok(Response::new(InstanceExistsResponse {
            existence: InstanceExistence::Exists as i32,
        }))
    }
    async fn instance_shutdown(
        &self,
        _: Request<InstanceShutdownRequest>,
    ) -> Result<Response<InstanceShutdownResponse>, Status> {
        Err(Status::unimplemented("unused"))
    }
    async fn instance_metadata(
        &self,
        r: Request<InstanceMetadataRequest>,
    ) -> Result<Response<InstanceMetadataResponse>, Status> {
        let name = r.into_inner().node.unwrap_or_default().name;
        let count = |prefix: &str| name.strip_prefix(prefix).map(|n| n.parse().unwrap());
        let metadata = if let Some(huge) = self.huge.as_ref().filter(|_| name == "huge") {
            (**huge).clone()
        } else if let Some(n) = count("addresses-") {
            InstanceMetadata {
                node_addresses: addresses(n),
                ..Default::default()
            }
        } else if let Some(n) = count("labels-") {
            InstanceMetadata {
                additional_labels: (0..n).map(|i| (format!("l{i}"), "v".into())).collect(),
                ..Default::default()
            }
        } else {
            InstanceMetadata::default()
        };
        Ok(Response::new(InstanceMetadataResponse {
            metadata: Some(metadata),
            ..Default::default()
        }))
    }
}

impl Hostile {
    /// A fresh token every page: it never repeats and never ends.
    async fn next_page(&self) -> String {
        tokio::time::sleep(self.page_delay).await;
        let page = self.list_calls.fetch_add(1, Ordering::SeqCst);
        format!("page-{page}")
    }
}

#[tonic::async_trait]
impl RawListing for Hostile {
    async fn list(
        &self,
        request: Request<ListLoadBalancersRequest>,
    ) -> Result<Response<ListLoadBalancersResponse>, Status> {
        if self.huge.is_some() {
            // The provider process: a legitimate, large listing.
            let page = request.get_ref().page_token.parse().unwrap_or(0);
            return Ok(Response::new(huge_listing_page(page)));
        }
        let page = self.list_calls.load(Ordering::SeqCst);
        Ok(Response::new(ListLoadBalancersResponse {
            load_balancers: vec![LoadBalancerSummary {
                name: format!("lb-{page}"),
                service_uid: format!("uid-{page}"),
                ..Default::default()
            }],
            next_page_token: self.next_page().await,
        }))
    }
}

#[tonic::async_trait]
impl routes_service_server::RoutesService for Hostile {
    async fn list_routes(
        &self,
        _: Request<ListRoutesRequest>,
    ) -> Result<Response<ListRoutesResponse>, Status> {
        let page = self.list_calls.load(Ordering::SeqCst);
        Ok(Response::new(ListRoutesResponse {
            routes: vec![Route {
                target_node: "n".into(),
                destination_cidr: format!("10.{}.{}.0/24", page >> 8 & 255, page & 255),
                ..Default::default()
            }],
            next_page_token: self.next_page().await,
        }))
    }
    async fn create_route(
        &self,
        _: Request<CreateRouteRequest>,
    ) -> Result<Response<CreateRouteResponse>, Status> {
        Err(Status::unimplemented("unused"))
    }
    async fn delete_route(
        &self,
        _: Request<DeleteRouteRequest>,
    ) -> Result<Response<DeleteRouteResponse>, Status> {
        self.deletes.fetch_add(1, Ordering::SeqCst);
        Err(Status::unimplemented("unused"))
    }
}

struct Serving {
    endpoint: String,
    provider: Hostile,
    held: watch::Receiver<usize>,
    release: watch::Sender<bool>,
    _dir: tempfile::TempDir,
}

/// Serves a [`Hostile`] on its own thread and runtime, so what the server
/// spends never counts against the client's runtime.
fn serve(page_delay: Duration) -> Serving {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hostile.sock");
    let (held_tx, held) = watch::channel(0);
    let (release, release_rx) = watch::channel(false);
    let provider = Hostile {
        list_calls: Arc::default(),
        deletes: Arc::default(),
        page_delay,
        held: held_tx,
        release: release_rx,
        huge: None,
    };
    let (bound_tx, bound) = std::sync::mpsc::channel();
    let p = provider.clone();
    let socket = path.clone();
    std::thread::spawn(move || serve_on(&socket, p, || bound_tx.send(()).unwrap()));
    bound.recv().unwrap();
    Serving {
        endpoint: format!("unix://{}", path.display()),
        provider,
        held,
        release,
        _dir: dir,
    }
}

/// Serves `provider` on `socket` until the process ends; `bound` is
/// called once the socket accepts connections.
fn serve_on(socket: &std::path::Path, provider: Hostile, bound: impl FnOnce()) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let listener = bind_socket(socket, 0o600).await.unwrap();
        bound();
        use instances_service_server::InstancesServiceServer;
        use routes_service_server::RoutesServiceServer;
        let max = ccm_provider_sdk::MAX_MESSAGE_BYTES;
        let _ = tonic::transport::Server::builder()
            .add_service(
                RawIdentity::new(
                    "hostile",
                    &[
                        Capability::Instances,
                        Capability::LoadBalancers,
                        Capability::ListLoadBalancers,
                        Capability::Routes,
                    ],
                )
                .server(),
            )
            .add_service(
                InstancesServiceServer::new(provider.clone()).max_encoding_message_size(max),
            )
            .add_service(
                ListingOnly::server(provider.clone(), provider.deletes.clone())
                    .max_encoding_message_size(max),
            )
            .add_service(RoutesServiceServer::new(provider))
            .serve_with_incoming(UnixListenerStream::new(listener))
            .await;
    });
}

/// One test at a time: one measures the process's resident memory.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const PROVIDER_SOCKET_ENV: &str = "ANSWER_BOUNDS_PROVIDER_SOCKET";

/// Not a test: the provider process of
/// [`a_huge_instance_metadata_answer_is_refused_without_stalling_the_runtime`],
/// which runs this binary with only this test and the socket in
/// [`PROVIDER_SOCKET_ENV`], so the client's memory is measured alone.
#[test]
fn hostile_provider_process() {
    let Some(socket) = std::env::var_os(PROVIDER_SOCKET_ENV) else {
        return;
    };
    let (held, _) = watch::channel(0);
    let (_, release) = watch::channel(false);
    let provider = Hostile {
        list_calls: Arc::default(),
        deletes: Arc::default(),
        page_delay: Duration::ZERO,
        held,
        release,
        huge: Some(Arc::new(huge_metadata())),
    };
    serve_on(std::path::Path::new(&socket), provider, || {});
}

/// The provider process; killed when dropped.
struct ProviderProcess {
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl ProviderProcess {
    /// This binary re-run as [`hostile_provider_process`], and a client
    /// that has done its handshake with it.
    async fn start() -> (ProviderProcess, ProviderClient) {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("hostile.sock");
        let child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "hostile_provider_process", "--nocapture"])
            .env(PROVIDER_SOCKET_ENV, &socket)
            .spawn()
            .unwrap();
        let process = ProviderProcess { child, _dir: dir };
        let endpoint = format!("unix://{}", socket.display());
        let c = ProviderClient::connect_lazy(&endpoint, ClientOptions::default()).unwrap();
        let started = Instant::now();
        while let Err(e) = c.handshake().await {
            assert!(started.elapsed() < Duration::from_secs(30), "{e}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        (process, c)
    }
}

impl Drop for ProviderProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn node(name: &str) -> NodeRef {
    NodeRef {
        name: name.into(),
        ..Default::default()
    }
}

/// The violation of an invalid answer to `method`.
fn violation(method: &str, result: Result<impl std::fmt::Debug, ClientError>) -> (String, String) {
    match result {
        Err(ClientError::InvalidResponse {
            method: m,
            violation,
        }) if m == method => (violation.field, violation.problem),
        other => panic!("{method}: expected an invalid answer, got {other:?}"),
    }
}

/// Finding 5: a provider whose every page names a fresh next page. The
/// listing fails after the client's page budget, naming the field; before,
/// it was followed for 100,000 pages.
#[tokio::test]
async fn a_listing_that_never_ends_fails_within_its_page_budget() {
    let _serial = SERIAL.lock().await;
    let serving = serve(Duration::ZERO);
    let c = ProviderClient::connect_lazy(&serving.endpoint, ClientOptions::default()).unwrap();
    let max_pages = ClientOptions::default().max_list_pages;
    let calls = || serving.provider.list_calls.swap(0, Ordering::SeqCst);

    let listed = tokio::time::timeout(Duration::from_secs(20), c.list_load_balancers("k"))
        .await
        .unwrap_or_else(|_| panic!("still listing after 20 s, {} pages", calls()));
    let (field, problem) = violation("ListLoadBalancers", listed);
    assert_eq!(field, "next_page_token", "{problem}");
    assert!(problem.contains(&format!("{max_pages} pages")), "{problem}");
    assert_eq!(calls(), max_pages);

    let listed = tokio::time::timeout(Duration::from_secs(20), c.list_routes("k"))
        .await
        .unwrap_or_else(|_| panic!("still listing after 20 s, {} pages", calls()));
    assert_eq!(violation("ListRoutes", listed).0, "next_page_token");
    assert_eq!(calls(), max_pages);
    assert_eq!(serving.provider.deletes.load(Ordering::SeqCst), 0);
}

/// Finding 5: pages that each come in time but never end fail the listing
/// once its time budget is spent.
#[tokio::test]
async fn a_listing_that_never_ends_fails_within_its_time_budget() {
    let _serial = SERIAL.lock().await;
    let serving = serve(Duration::from_millis(20));
    let budget = Duration::from_millis(500);
    let c = ProviderClient::connect_lazy(
        &serving.endpoint,
        ClientOptions {
            max_list_duration: budget,
            ..Default::default()
        },
    )
    .unwrap();
    c.handshake().await.unwrap();
    let started = Instant::now();
    let err = tokio::time::timeout(budget * 20, c.list_routes("k"))
        .await
        .expect("the listing ends within its budget")
        .unwrap_err();
    let elapsed = started.elapsed();
    let e = err.provider_error().expect("a deadline error");
    assert_eq!(e.code(), tonic::Code::DeadlineExceeded, "{err}");
    assert!(e.message().contains("ListRoutes"), "{err}");
    assert!(elapsed < budget + Duration::from_secs(2), "{elapsed:?}");
    let pages = serving.provider.list_calls.load(Ordering::SeqCst);
    assert!(
        (2..=budget.as_millis() as usize / 20 + 1).contains(&pages),
        "{pages}"
    );
}

/// Finding 8: an error text past the old 1 MiB header limit reset the
/// HTTP/2 connection and failed every call in flight on it. It fails its
/// own call only (with the text cut), up to the contract's message bound.
#[tokio::test]
async fn a_huge_error_trailer_fails_its_own_call_only() {
    let _serial = SERIAL.lock().await;
    let mut serving = serve(Duration::ZERO);
    let c = ProviderClient::connect_lazy(&serving.endpoint, ClientOptions::default()).unwrap();
    c.handshake().await.unwrap();
    for (round, bytes) in [2 << 20, 15 << 20].into_iter().enumerate() {
        serving.release.send_replace(false);
        let held: Vec<_> = (0..20)
            .map(|i| {
                let c = c.clone();
                tokio::spawn(async move { c.instance_exists(node(&format!("held-{i}"))).await })
            })
            .collect();
        let all_held = 20 * (round + 1);
        tokio::time::timeout(
            Duration::from_secs(10),
            serving.held.wait_for(|n| *n == all_held),
        )
        .await
        .expect("the calls reach the provider")
        .unwrap();
        let huge = c
            .instance_exists(node(&format!("huge-error-{bytes}")))
            .await;
        serving.release.send_replace(true);
        let mut others = Vec::new();
        for call in held {
            others.push(call.await.unwrap());
        }
        let failed = others.iter().filter(|r| r.is_err()).count();
        let first = others.iter().find_map(|r| r.as_ref().err());
        assert_eq!(
            failed, 0,
            "{bytes}-byte error: {failed} of 20 calls in flight failed, first: {first:?}; \
             the huge call: {huge:?}"
        );
        let err = huge.unwrap_err();
        let e = err.provider_error().expect("the provider's own error");
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{err}");
        assert!(
            e.message().starts_with("xxx")
                && e.message().len() <= ccm_provider_sdk::error::MAX_ERROR_TEXT_BYTES,
            "cut to a bounded text: {} bytes",
            e.message().len()
        );
        assert_eq!(
            c.instance_exists(node("after")).await.unwrap(),
            Existence::Exists
        );
    }
    assert_eq!(c.connection_count(), 1, "the connection was never rebuilt");
}

/// The process's resident set, from /proc/self/statm.
fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// Finding 3: a 15.6 MB `InstanceMetadata` answer (within the contract's
/// 16 MiB message bound) is refused at once as a provider bug naming the
/// RPC, and a ticker on the same single-threaded runtime keeps ticking.
/// Before, the client decoded, checked and copied the whole answer and
/// handed it on.
#[tokio::test(flavor = "current_thread")]
async fn a_huge_instance_metadata_answer_is_refused_without_stalling_the_runtime() {
    let _serial = SERIAL.lock().await;
    let encoded = InstanceMetadataResponse {
        metadata: Some(huge_metadata()),
        ..Default::default()
    }
    .encoded_len();
    assert!(
        (15_000_000..ccm_provider_sdk::MAX_MESSAGE_BYTES).contains(&encoded),
        "{encoded}"
    );
    let (_provider, c) = ProviderProcess::start().await;
    let (stop, mut stopped) = watch::channel(false);
    let ticker = tokio::spawn(async move {
        let mut max_gap = Duration::ZERO;
        let mut last = Instant::now();
        let mut tick = tokio::time::interval(Duration::from_millis(5));
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stopped.changed() => return max_gap,
            }
            max_gap = max_gap.max(last.elapsed());
            last = Instant::now();
        }
    });
    let rss_before = rss_bytes();
    let started = Instant::now();
    let answer = c.instance_metadata(node("huge")).await;
    let elapsed = started.elapsed();
    let rss_after = rss_bytes();
    stop.send_replace(true);
    let max_gap = ticker.await.unwrap();
    let figures = format!(
        "in {elapsed:?}, runtime's longest stall {max_gap:?}, RSS {} -> {} MiB",
        rss_before >> 20,
        rss_after >> 20
    );
    let answer = answer.map(|m| format!("{} addresses", m.node_addresses.len()));
    let (field, problem) = match answer {
        Err(ClientError::InvalidResponse { method, violation }) => {
            assert_eq!(method, "InstanceMetadata", "{figures}");
            (violation.field, violation.problem)
        }
        other => panic!("expected a refused answer, got {other:?} {figures}"),
    };
    assert_eq!(field, "answer", "{problem}");
    assert!(problem.contains("1048576"), "names the bound: {problem}");
    assert!(elapsed < Duration::from_secs(2), "{figures}");
    assert!(max_gap < Duration::from_millis(250), "{figures}");
    assert!(rss_after < rss_before + (32 << 20), "{figures}");
    eprintln!("refused {figures}");

    // Within the size bound, the counts are bounded too.
    let (field, problem) = violation(
        "InstanceMetadata",
        c.instance_metadata(node("addresses-2000")).await,
    );
    assert_eq!(field, "metadata.node_addresses", "{problem}");
    let (field, problem) = violation(
        "InstanceMetadata",
        c.instance_metadata(node("labels-300")).await,
    );
    assert_eq!(field, "metadata.additional_labels", "{problem}");
    // And what is within them passes.
    let m = c.instance_metadata(node("addresses-1024")).await.unwrap();
    assert_eq!(m.node_addresses.len(), 1024);
    let m = c.instance_metadata(node("labels-256")).await.unwrap();
    assert_eq!(m.additional_labels.len(), 256);
}

/// A legitimate 15 MB listing is decoded, used and dropped, and leaves at
/// most 32 MiB with the process (glibc keeps some freed heap pages, which
/// the next listing reuses): not the permanent hundreds of MiB a large
/// answer cost before.
#[tokio::test(flavor = "current_thread")]
async fn a_large_listing_leaves_little_memory_behind() {
    let _serial = SERIAL.lock().await;
    let encoded: usize = (0..HUGE_PAGES)
        .map(|p| huge_listing_page(p).encoded_len())
        .sum();
    assert!((14_000_000..16_000_000).contains(&encoded), "{encoded}");
    let (_provider, c) = ProviderProcess::start().await;
    let rss_before = rss_bytes();
    let listing = c.list_load_balancers("c").await.unwrap();
    let rss_holding = rss_bytes();
    assert_eq!(listing.len(), HUGE_PAGES * PAGE);
    drop(listing);
    // Returned right away or within a moment, as the client sees fit.
    let deadline = Instant::now() + Duration::from_secs(5);
    let rss_after = loop {
        let rss = rss_bytes();
        if rss < rss_before + (32 << 20) || Instant::now() >= deadline {
            break rss;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let figures = format!(
        "RSS {} MiB before, {} MiB holding the listing, {} MiB after dropping it",
        rss_before >> 20,
        rss_holding >> 20,
        rss_after >> 20
    );
    eprintln!("{figures}");
    assert!(rss_after < rss_before + (32 << 20), "{figures}");
}
