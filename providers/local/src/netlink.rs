//! Routes of the local provider are entries in a Linux kernel routing table,
//! written over rtnetlink.
//!
//! A dedicated table (100 is a good default) keeps these routes apart from
//! the main table, which the host's own network configuration owns: listing
//! and deleting here can then never disturb a route the provider did not
//! write, and a policy rule (`ip rule add to 10.244.0.0/16 lookup 100`)
//! decides which traffic consults the table at all.
//!
//! Changing routes needs `CAP_NET_ADMIN` in the network namespace the process
//! runs in; reading them does not.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ccm_provider_sdk::Cidr;
use futures::StreamExt;
use rtnetlink::packet_core::{
    NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_REPLACE, NLM_F_REQUEST, NetlinkMessage,
    NetlinkPayload,
};
use rtnetlink::packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
    RouteVia,
};
use rtnetlink::packet_route::{AddressFamily, RouteNetlinkMessage};
use rtnetlink::sys::AsyncSocket;

/// The `rtm_protocol` stamped on every route this module writes.
///
/// The kernel does not interpret protocol numbers above `RTPROT_STATIC` (4);
/// they only tell route owners apart. 204 is unassigned in iproute2's
/// `rt_protos`, so an operator can find these routes with
/// `ip route show table 100 proto 204` (or name it by adding `204 ccm` to
/// `/etc/iproute2/rt_protos.d/ccm.conf`).
pub const ROUTE_PROTOCOL: u8 = 204;

/// A connection to the kernel's routing tables, scoped to one table.
///
/// The netlink connection runs as a task on the tokio runtime that was
/// current in [`KernelRoutes::connect`]; dropping this value stops it.
#[derive(Debug)]
pub struct KernelRoutes {
    table: u32,
    handle: rtnetlink::Handle,
    connection: tokio::task::JoinHandle<()>,
}

/// One unicast route as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KernelRoute {
    /// The network address of the destination, host bits zero.
    pub destination: IpAddr,
    /// The prefix length of the destination (0..=32 for IPv4, 0..=128 for IPv6).
    pub prefix_len: u8,
    /// The next hop; `None` for a route straight out of an interface (or a
    /// multipath route, which this module never writes).
    pub gateway: Option<IpAddr>,
}

impl KernelRoute {
    /// The destination in the CIDR form the rest of the provider speaks,
    /// e.g. `10.244.1.0/24`, so it compares equal to what `replace` took.
    pub fn destination_cidr(&self) -> String {
        format!("{}/{}", self.destination, self.prefix_len)
    }
}

/// Why a routing table could not be read or changed.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    /// Table 0 is `RT_TABLE_UNSPEC`: the kernel would pick the main table
    /// for writes and every table for dumps.
    #[error(
        "routing table id {0} is invalid: 0 means \"unspecified\" to the kernel; use a dedicated table such as 100"
    )]
    InvalidTable(u32),
    /// The netlink connection is a task and needs a runtime to run on.
    #[error("KernelRoutes::connect must be called within a tokio runtime")]
    NoRuntime,
    /// The netlink socket could not be opened.
    #[error("cannot open a netlink route socket: {0}")]
    Socket(#[source] std::io::Error),
    /// The destination is not a network in CIDR notation.
    #[error("invalid CIDR {cidr:?}: {reason}")]
    InvalidCidr {
        /// The destination as given.
        cidr: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The gateway cannot be a next hop for the destination.
    #[error("invalid gateway {gateway} for {destination}: {reason}")]
    InvalidGateway {
        /// The destination network.
        destination: String,
        /// The gateway as given.
        gateway: IpAddr,
        /// What is wrong with it.
        reason: String,
    },
    /// The process lacks `CAP_NET_ADMIN` over its network namespace.
    #[error(
        "permission denied to {operation}: changing kernel routes needs CAP_NET_ADMIN in this network namespace; run as root, in a privileged container or one with the NET_ADMIN capability, or (for tests) inside `unshare -rn`"
    )]
    PermissionDenied {
        /// What was attempted, naming route and table.
        operation: String,
    },
    /// The kernel accepts a gateway only when a route to it already exists
    /// (normally a connected network on some interface).
    #[error(
        "cannot route {destination} via {gateway} in table {table}: the gateway is not reachable, no interface has a route to it ({detail})"
    )]
    GatewayUnreachable {
        /// The destination network.
        destination: String,
        /// The unreachable gateway.
        gateway: IpAddr,
        /// The routing table.
        table: u32,
        /// The kernel's words.
        detail: String,
    },
    /// Any other failure of a netlink request, or a lost connection.
    #[error("{operation} failed: {detail}")]
    Netlink {
        /// What was attempted, naming route and table.
        operation: String,
        /// The positive errno the kernel answered with; `None` when the
        /// connection itself failed.
        errno: Option<i32>,
        /// The errno's text and the kernel's extended-ack message, if any.
        detail: String,
    },
}

/// A failed request before it is given the context of an operation.
#[derive(Debug)]
enum Failure {
    Kernel { errno: i32, message: Option<String> },
    Connection(&'static str),
}

impl Failure {
    fn detail(&self) -> String {
        match self {
            Failure::Kernel { errno, message } => {
                let text = std::io::Error::from_raw_os_error(*errno);
                match message {
                    Some(message) => format!("{text}: {message}"),
                    None => text.to_string(),
                }
            }
            Failure::Connection(detail) => (*detail).to_string(),
        }
    }

    fn into_error(self, operation: String) -> RouteError {
        match self {
            Failure::Kernel {
                errno: libc::EPERM | libc::EACCES,
                ..
            } => RouteError::PermissionDenied { operation },
            Failure::Kernel { errno, .. } => RouteError::Netlink {
                operation,
                errno: Some(errno),
                detail: self.detail(),
            },
            Failure::Connection(_) => RouteError::Netlink {
                operation,
                errno: None,
                detail: self.detail(),
            },
        }
    }
}

impl KernelRoutes {
    /// Opens a netlink connection in the current network namespace, scoped
    /// to routing table `table`.
    ///
    /// `table` may be any id but 0. 253 (default), 254 (main) and 255 (local)
    /// are accepted, but sharing them with the host's own routes is asking
    /// for trouble: prefer a dedicated table such as 100. Must be called
    /// within a tokio runtime, which then carries the connection.
    pub fn connect(table: u32) -> Result<Self, RouteError> {
        if table == u32::from(RouteHeader::RT_TABLE_UNSPEC) {
            return Err(RouteError::InvalidTable(table));
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| RouteError::NoRuntime)?;
        // Strict checking makes the kernel filter dumps by table itself,
        // instead of sending a full main table only to have it dropped here.
        let (mut connection, handle, _unsolicited) =
            rtnetlink::new_connection_with_strict_check().map_err(RouteError::Socket)?;
        // A dump reports its failure only in its final NLMSG_DONE, and a
        // write's success only in its ack: without both, an error or a lost
        // connection would look like an empty table or a success.
        connection.set_forward_done(true);
        connection.set_forward_ack(true);
        // Best effort: only makes errors more specific ("Nexthop has invalid
        // gateway"); kernels before 4.12 do not have it.
        connection.socket_mut().socket_mut().set_ext_ack(true).ok();
        let connection = runtime.spawn(connection);
        Ok(Self {
            table,
            handle,
            connection,
        })
    }

    /// The routing table this connection reads and writes.
    pub fn table(&self) -> u32 {
        self.table
    }

    /// Every unicast route in the table, IPv4 then IPv6, each family sorted
    /// by destination.
    ///
    /// This includes routes other writers put in the table (any protocol),
    /// so that the caller sees the table as the kernel routes by it.
    pub async fn list(&self) -> Result<Vec<KernelRoute>, RouteError> {
        let mut routes = Vec::new();
        for family in [AddressFamily::Inet, AddressFamily::Inet6] {
            let mut request = RouteMessage::default();
            request.header.address_family = family;
            self.set_table(&mut request);
            match self.dump(request).await {
                Ok(messages) => routes.extend(messages.iter().filter_map(|m| self.kernel_route(m))),
                // The kernel creates a table with its first route of a
                // family; a dump filtered by a table it does not have fails.
                Err(Failure::Kernel {
                    errno: libc::ENOENT,
                    ..
                }) => {}
                Err(failure) => {
                    return Err(failure.into_error(format!("list routes of table {}", self.table)));
                }
            }
        }
        routes.sort();
        Ok(routes)
    }

    /// Makes `destination` (a network in CIDR notation, IPv4 or IPv6, host
    /// bits zero) route via `gateway` in the table, replacing the gateway of
    /// a route already there, so calling it again is harmless.
    ///
    /// The gateway must be of the destination's family and reachable through
    /// a connected network, else the kernel refuses it
    /// ([`RouteError::GatewayUnreachable`]).
    pub async fn replace(&self, destination: &str, gateway: IpAddr) -> Result<(), RouteError> {
        let (address, prefix_len) = parse_cidr(destination)?;
        let destination = format!("{address}/{prefix_len}");
        if address.is_ipv4() != gateway.is_ipv4() {
            return Err(RouteError::InvalidGateway {
                destination,
                gateway,
                reason: "the gateway's address family differs from the destination's".into(),
            });
        }
        if gateway.is_unspecified() || gateway.is_multicast() {
            return Err(RouteError::InvalidGateway {
                destination,
                gateway,
                reason: "a gateway must be a unicast address".into(),
            });
        }
        let mut route = self.route_message(address, prefix_len);
        route.header.protocol = RouteProtocol::from(ROUTE_PROTOCOL);
        route.header.scope = RouteScope::Universe;
        route.header.kind = RouteType::Unicast;
        route
            .attributes
            .push(RouteAttribute::Gateway(RouteAddress::from(gateway)));
        let result = self
            .acked(
                RouteNetlinkMessage::NewRoute(route),
                NLM_F_CREATE | NLM_F_REPLACE,
            )
            .await;
        match result {
            Ok(()) => Ok(()),
            // IPv4 answers ENETUNREACH, IPv6 EHOSTUNREACH.
            Err(
                failure @ Failure::Kernel {
                    errno: libc::ENETUNREACH | libc::EHOSTUNREACH,
                    ..
                },
            ) => Err(RouteError::GatewayUnreachable {
                detail: failure.detail(),
                destination,
                gateway,
                table: self.table,
            }),
            Err(failure) => Err(failure.into_error(format!(
                "replace route {destination} via {gateway} in table {}",
                self.table
            ))),
        }
    }

    /// Removes every route for `destination` (CIDR notation, host bits zero)
    /// from the table, whatever its gateway or protocol; a route that is not
    /// there, or a table that does not exist, is already the wanted state.
    pub async fn delete(&self, destination: &str) -> Result<(), RouteError> {
        let (address, prefix_len) = parse_cidr(destination)?;
        // The kernel deletes one matching route per request (routes for one
        // destination can differ in metric), so repeat until none is left.
        loop {
            let mut route = self.route_message(address, prefix_len);
            // Like `ip route del`: scope "nowhere", protocol and type
            // unspecified match a route of any scope, protocol and type.
            route.header.scope = RouteScope::NoWhere;
            match self.acked(RouteNetlinkMessage::DelRoute(route), 0).await {
                Ok(()) => {}
                Err(Failure::Kernel {
                    errno: libc::ESRCH, ..
                }) => return Ok(()),
                Err(failure) => {
                    return Err(failure.into_error(format!(
                        "delete route {address}/{prefix_len} from table {}",
                        self.table
                    )));
                }
            }
        }
    }

    /// A message naming `address/prefix_len` in this table; the caller adds
    /// what the operation needs.
    fn route_message(&self, address: IpAddr, prefix_len: u8) -> RouteMessage {
        let mut route = RouteMessage::default();
        route.header.address_family = match address {
            IpAddr::V4(_) => AddressFamily::Inet,
            IpAddr::V6(_) => AddressFamily::Inet6,
        };
        route.header.destination_prefix_length = prefix_len;
        route
            .attributes
            .push(RouteAttribute::Destination(RouteAddress::from(address)));
        self.set_table(&mut route);
        route
    }

    /// The header's table is one byte; larger ids go in RTA_TABLE with the
    /// header left unspecified, as iproute2 does.
    fn set_table(&self, route: &mut RouteMessage) {
        match u8::try_from(self.table) {
            Ok(table) => route.header.table = table,
            Err(_) => {
                route.header.table = RouteHeader::RT_TABLE_UNSPEC;
                route.attributes.push(RouteAttribute::Table(self.table));
            }
        }
    }

    /// `route` as a [`KernelRoute`] when it is a unicast route of this table.
    ///
    /// The kernel already filters dumps by table, but not before Linux 4.20,
    /// so the table is checked here too.
    fn kernel_route(&self, route: &RouteMessage) -> Option<KernelRoute> {
        if route.header.kind != RouteType::Unicast {
            return None;
        }
        let mut table = u32::from(route.header.table);
        let mut destination = None;
        let mut gateway = None;
        for attribute in &route.attributes {
            match attribute {
                // RTA_TABLE carries the full id whenever present; the header
                // byte is only right for ids below 256.
                RouteAttribute::Table(id) => table = *id,
                RouteAttribute::Destination(address) => destination = Some(address),
                RouteAttribute::Gateway(RouteAddress::Inet(address))
                | RouteAttribute::Via(RouteVia::Inet(address)) => {
                    gateway = Some(IpAddr::V4(*address));
                }
                RouteAttribute::Gateway(RouteAddress::Inet6(address))
                | RouteAttribute::Via(RouteVia::Inet6(address)) => {
                    gateway = Some(IpAddr::V6(*address));
                }
                _ => {}
            }
        }
        if table != self.table {
            return None;
        }
        let destination = match (route.header.address_family, destination) {
            (_, Some(RouteAddress::Inet(address))) => IpAddr::V4(*address),
            (_, Some(RouteAddress::Inet6(address))) => IpAddr::V6(*address),
            // A default route has no RTA_DST.
            (AddressFamily::Inet, None) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            (AddressFamily::Inet6, None) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            _ => return None,
        };
        Some(KernelRoute {
            destination,
            prefix_len: route.header.destination_prefix_length,
            gateway,
        })
    }

    /// Sends a request the kernel must ack, and waits for that ack.
    async fn acked(&self, message: RouteNetlinkMessage, flags: u16) -> Result<(), Failure> {
        let mut request = NetlinkMessage::from(message);
        request.header.flags = NLM_F_REQUEST | NLM_F_ACK | flags;
        let mut responses = self
            .handle
            .clone()
            .request(request)
            .map_err(|_| Failure::Connection("the netlink connection is closed"))?;
        while let Some(response) = responses.next().await {
            if let NetlinkPayload::Error(error) = response.payload {
                return match error.code {
                    None => Ok(()),
                    Some(code) => Err(Failure::Kernel {
                        errno: code.get().abs(),
                        message: extended_ack_message(original_and_tlvs(&error.header)),
                    }),
                };
            }
        }
        Err(Failure::Connection(
            "the netlink connection closed before the kernel acknowledged the request",
        ))
    }

    /// Dumps the routes `request` selects, failing unless the dump finished.
    async fn dump(&self, request: RouteMessage) -> Result<Vec<RouteMessage>, Failure> {
        let mut request = NetlinkMessage::from(RouteNetlinkMessage::GetRoute(request));
        request.header.flags = NLM_F_REQUEST | NLM_F_DUMP;
        let mut responses = self
            .handle
            .clone()
            .request(request)
            .map_err(|_| Failure::Connection("the netlink connection is closed"))?;
        let mut routes = Vec::new();
        while let Some(response) = responses.next().await {
            match response.payload {
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewRoute(route)) => {
                    routes.push(route);
                }
                NetlinkPayload::Done(done) if done.code == 0 => return Ok(routes),
                NetlinkPayload::Done(done) => {
                    return Err(Failure::Kernel {
                        errno: done.code.abs(),
                        message: extended_ack_message(&done.extended_ack),
                    });
                }
                NetlinkPayload::Error(error) => {
                    return Err(Failure::Kernel {
                        errno: error.code.map_or(libc::EIO, |code| code.get().abs()),
                        message: extended_ack_message(original_and_tlvs(&error.header)),
                    });
                }
                NetlinkPayload::Overrun(_) => {
                    return Err(Failure::Connection(
                        "the kernel dropped part of the route dump (socket overrun)",
                    ));
                }
                _ => {}
            }
        }
        Err(Failure::Connection(
            "the netlink connection closed before the route dump finished",
        ))
    }
}

impl Drop for KernelRoutes {
    fn drop(&mut self) {
        // The task would otherwise outlive its only handle, holding the socket.
        self.connection.abort();
    }
}

/// Parses `cidr` as `address/prefix_len`, refusing host bits so that a typo
/// such as `10.244.1.5/24` is not silently taken for `10.244.1.0/24`.
fn parse_cidr(cidr: &str) -> Result<(IpAddr, u8), RouteError> {
    let invalid = |reason: String| RouteError::InvalidCidr {
        cidr: cidr.to_string(),
        reason,
    };
    let parsed = Cidr::parse(cidr).map_err(|e| invalid(e.to_string()))?;
    if !parsed.is_network() {
        return Err(invalid(format!(
            "host bits are set; the network is {}",
            parsed.network()
        )));
    }
    Ok((parsed.addr(), parsed.prefix_len()))
}

/// NLMSG_ERROR's payload past the error code: the request it answers (whose
/// first four bytes are its length), then the extended-ack attributes.
fn original_and_tlvs(payload: &[u8]) -> &[u8] {
    let original = payload
        .get(..4)
        .and_then(|bytes| <[u8; 4]>::try_from(bytes).ok())
        .map_or(payload.len(), |bytes| {
            align4(u32::from_ne_bytes(bytes) as usize)
        });
    payload.get(original..).unwrap_or_default()
}

/// The kernel's human-readable reason (NLMSGERR_ATTR_MSG) among extended-ack
/// attributes, e.g. "Nexthop has invalid gateway".
fn extended_ack_message(mut attributes: &[u8]) -> Option<String> {
    const NLMSGERR_ATTR_MSG: u16 = 1;
    const NLA_TYPE_MASK: u16 = 0x3fff;
    while attributes.len() >= 4 {
        let len = usize::from(u16::from_ne_bytes([attributes[0], attributes[1]]));
        let kind = u16::from_ne_bytes([attributes[2], attributes[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > attributes.len() {
            return None;
        }
        if kind == NLMSGERR_ATTR_MSG {
            let text = &attributes[4..len];
            let text = text.split(|&b| b == 0).next().unwrap_or_default();
            let text = String::from_utf8_lossy(text).trim().to_string();
            return (!text.is_empty()).then_some(text);
        }
        attributes = attributes.get(align4(len)..).unwrap_or_default();
    }
    None
}

fn align4(len: usize) -> usize {
    len.next_multiple_of(4)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invalid_reason(cidr: &str) -> String {
        match parse_cidr(cidr) {
            Err(RouteError::InvalidCidr { reason, .. }) => reason,
            other => panic!("{cidr:?}: expected InvalidCidr, got {other:?}"),
        }
    }

    #[test]
    fn networks_in_cidr_notation_parse() {
        let cases = [
            ("10.244.1.0/24", "10.244.1.0", 24),
            ("0.0.0.0/0", "0.0.0.0", 0),
            ("192.0.2.7/32", "192.0.2.7", 32),
            ("fd00:10:244:1::/64", "fd00:10:244:1::", 64),
            ("::/0", "::", 0),
            ("2001:db8::1/128", "2001:db8::1", 128),
        ];
        for (cidr, address, prefix_len) in cases {
            assert_eq!(
                parse_cidr(cidr).unwrap(),
                (address.parse().unwrap(), prefix_len),
                "{cidr}"
            );
        }
    }

    #[test]
    fn host_bits_name_the_network_meant() {
        assert!(invalid_reason("10.244.1.5/24").contains("10.244.1.0/24"));
        assert!(invalid_reason("fd00:10:244:1::1/64").contains("fd00:10:244:1::/64"));
        assert!(invalid_reason("10.0.0.1/0").contains("0.0.0.0/0"));
    }

    #[test]
    fn malformed_cidrs_are_refused() {
        for cidr in [
            "",
            "garbage",
            "10.244.1.0",
            "10.244.1.0/",
            "10.244.1.0/33",
            "10.244.1.0/-1",
            "10.244.1.0/+24",
            "10.244.1.0/24/1",
            "10.244.1/24",
            " 10.244.1.0/24",
            "fd00::/129",
            "fd00::/256",
        ] {
            invalid_reason(cidr);
        }
    }

    #[test]
    fn destination_cidr_round_trips() {
        let route = KernelRoute {
            destination: "10.244.1.0".parse().unwrap(),
            prefix_len: 24,
            gateway: Some("127.0.1.1".parse().unwrap()),
        };
        assert_eq!(route.destination_cidr(), "10.244.1.0/24");
        let route = KernelRoute {
            destination: "fd00:10:244:1::".parse().unwrap(),
            prefix_len: 64,
            gateway: None,
        };
        assert_eq!(route.destination_cidr(), "fd00:10:244:1::/64");
    }

    #[test]
    fn table_zero_is_refused() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _guard = runtime.enter();
        let error = KernelRoutes::connect(0).unwrap_err();
        assert!(matches!(error, RouteError::InvalidTable(0)), "{error:?}");
        assert!(error.to_string().contains("100"), "{error}");
    }

    #[test]
    fn connect_outside_a_runtime_is_an_error_not_a_panic() {
        let error = KernelRoutes::connect(100).unwrap_err();
        assert!(matches!(error, RouteError::NoRuntime), "{error:?}");
    }

    #[test]
    fn permission_denied_names_the_capability_and_the_way_out() {
        let message = RouteError::PermissionDenied {
            operation: "replace route 10.244.1.0/24 via 127.0.1.1 in table 100".into(),
        }
        .to_string();
        assert!(message.contains("CAP_NET_ADMIN"), "{message}");
        assert!(message.contains("unshare -rn"), "{message}");
        assert!(message.contains("10.244.1.0/24"), "{message}");
    }

    /// An NLMSG_ERROR payload as the kernel builds it with extended acks on:
    /// the request, then NLMSGERR_ATTR_MSG and NLMSGERR_ATTR_OFFS.
    #[test]
    fn the_kernels_extended_ack_message_is_found() {
        let mut payload = Vec::new();
        payload.extend_from_slice(&20u32.to_ne_bytes());
        payload.extend_from_slice(&[0; 16]);
        let text = b"Nexthop has invalid gateway\0";
        payload.extend_from_slice(&((4 + text.len()) as u16).to_ne_bytes());
        payload.extend_from_slice(&1u16.to_ne_bytes());
        payload.extend_from_slice(text);
        payload.resize(align4(payload.len()), 0);
        payload.extend_from_slice(&8u16.to_ne_bytes());
        payload.extend_from_slice(&2u16.to_ne_bytes());
        payload.extend_from_slice(&12u32.to_ne_bytes());
        assert_eq!(
            extended_ack_message(original_and_tlvs(&payload)).as_deref(),
            Some("Nexthop has invalid gateway")
        );
        // Without attributes, or with a truncated one, there is no message.
        assert_eq!(
            extended_ack_message(original_and_tlvs(&payload[..20])),
            None
        );
        assert_eq!(
            extended_ack_message(original_and_tlvs(&payload[..26])),
            None
        );
        assert_eq!(extended_ack_message(original_and_tlvs(&[])), None);
    }
}
