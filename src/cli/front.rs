//! The flags every HTTP server of toolgate shares (`collect`, `console`, `mcp-proxy --listen`):
//! what the HTTP front ([`crate::http_front`]) is told.

/// The HTTP front's flags.
#[derive(Debug, Clone, clap::Args)]
pub struct FrontArgs {
    /// A host name (`name` or `name:port`) accepted in a request's `Host` besides loopback names
    /// (repeatable). Bound to a loopback address, a request naming another host gets 403 (DNS
    /// rebinding); given on any address, only loopback names and these are accepted.
    #[arg(long = "allowed-host", value_name = "HOST")]
    pub allowed_hosts: Vec<String>,
    /// Most connections one client address may hold open (counted at accept; at the cap the
    /// address's oldest connection that has sent nothing is closed, else the new one).
    #[arg(long, default_value_t = 64, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_connections_per_address: u64,
}

impl FrontArgs {
    /// The per-address cap.
    pub fn per_address(&self) -> usize {
        usize::try_from(self.max_connections_per_address).unwrap_or(usize::MAX)
    }
}
