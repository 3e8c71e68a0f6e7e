//! The provider's own `/metrics` (Prometheus text format): what each load
//! balancer's listeners carried and refused, each backend's health, the
//! inventory's and the route table's state. Rendered from the proxies'
//! counters at scrape time, so nothing is counted twice.

use std::fmt::Write;
use std::net::SocketAddr;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::cloud::LocalCloud;
use crate::proxy::Protocol;

/// Label values escaped as the text format requires.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The whole exposition.
pub async fn render(cloud: &LocalCloud) -> String {
    let world = cloud.world.lock().await;
    let mut rows = Vec::new();
    for (key, lb) in &world.lbs {
        if let Some(proxy) = world.proxies.get(key) {
            rows.push((
                lb.name.clone(),
                lb.vip,
                proxy.stats(),
                proxy.backend_health(),
            ));
        }
    }
    let routes = world.routes.len();
    let lbs = world.lbs.len();
    let running = world.proxies.len();
    drop(world);

    let mut out = String::new();
    family(
        &mut out,
        "local_load_balancers",
        "gauge",
        "Load balancers recorded, and how many have a running proxy.",
    );
    let _ = writeln!(out, "local_load_balancers{{state=\"recorded\"}} {lbs}");
    let _ = writeln!(out, "local_load_balancers{{state=\"running\"}} {running}");
    type Pick = fn(&crate::proxy::ListenerStats) -> u64;
    let counters: [(&str, &str, &str, Pick); 4] = [
        (
            "local_lb_connections_total",
            "counter",
            "TCP connections forwarded, UDP flows created.",
            |s| s.connections_total,
        ),
        (
            "local_lb_active_connections",
            "gauge",
            "TCP connections and UDP flows open now.",
            |s| s.active,
        ),
        (
            "local_lb_received_bytes_total",
            "counter",
            "Bytes from clients to backends.",
            |s| s.bytes_in,
        ),
        (
            "local_lb_sent_bytes_total",
            "counter",
            "Bytes from backends to clients.",
            |s| s.bytes_out,
        ),
    ];
    for (name, kind, help, pick) in counters {
        family(&mut out, name, kind, help);
        for (lb, vip, stats, _) in &rows {
            for s in stats {
                let _ = writeln!(
                    out,
                    "{name}{{load_balancer=\"{}\",vip=\"{vip}\",protocol=\"{}\",port=\"{}\"}} {}",
                    escape(lb),
                    protocol(s.protocol),
                    s.port,
                    pick(s)
                );
            }
        }
    }
    family(
        &mut out,
        "local_lb_rejected_total",
        "counter",
        "Connections (UDP: datagrams) refused: reason source (loadBalancerSourceRanges), rate (listener-max-qps) no_backend (no healthy backend answered) or flow_limit (UDP flow table full).",
    );
    for (lb, vip, stats, _) in &rows {
        for s in stats {
            for (reason, n) in [
                ("source", s.rejected_source),
                ("rate", s.rejected_rate),
                ("no_backend", s.no_backend),
                ("flow_limit", s.rejected_flow_limit),
            ] {
                let _ = writeln!(
                    out,
                    "local_lb_rejected_total{{load_balancer=\"{}\",vip=\"{vip}\",protocol=\"{}\",port=\"{}\",reason=\"{reason}\"}} {n}",
                    escape(lb),
                    protocol(s.protocol),
                    s.port
                );
            }
        }
    }
    family(
        &mut out,
        "local_lb_backend_healthy",
        "gauge",
        "1 when the backend passed its last health check.",
    );
    for (lb, _, _, health) in &rows {
        for (ip, healthy) in health {
            let _ = writeln!(
                out,
                "local_lb_backend_healthy{{load_balancer=\"{}\",backend=\"{ip}\"}} {}",
                escape(lb),
                u8::from(*healthy)
            );
        }
    }
    family(
        &mut out,
        "local_routes",
        "gauge",
        "Routes recorded in the kernel table.",
    );
    let _ = writeln!(out, "local_routes {routes}");
    family(
        &mut out,
        "local_inventory_valid",
        "gauge",
        "0 while the inventory file on disk is unusable (the previous one is in use).",
    );
    let _ = writeln!(
        out,
        "local_inventory_valid {}",
        u8::from(cloud.inventory.error().is_none())
    );
    family(
        &mut out,
        "local_inventory_instances",
        "gauge",
        "Instances in the inventory in use.",
    );
    let _ = writeln!(
        out,
        "local_inventory_instances {}",
        cloud.inventory.machines().len()
    );
    out
}

fn protocol(p: Protocol) -> &'static str {
    match p {
        Protocol::Tcp => "TCP",
        Protocol::Udp => "UDP",
    }
}

async fn metrics(State(cloud): State<LocalCloud>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        render(&cloud).await,
    )
}

/// Serves `/metrics` and `/healthz` on `addr` until `stop` completes.
pub async fn serve(
    cloud: LocalCloud,
    addr: SocketAddr,
    stop: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(cloud);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "metrics on http://{addr}/metrics");
    axum::serve(listener, app)
        .with_graceful_shutdown(stop)
        .await
}
