//! `memlens healthcheck`: a minimal HTTP/1.1 probe of `/healthz` in `std` alone, so the runtime
//! image needs no curl and the probe nothing but the socket (the binary links ureq for
//! `upload` and `check`; ARCHITECTURE.md says why this stays hand-written).

use std::process::ExitCode;

use clap::Args;

#[derive(Args)]
pub struct HealthArgs {
    /// The server's address (`0.0.0.0` is checked on loopback).
    #[arg(long, env = "MEMLENS_BIND", default_value = "127.0.0.1:8080")]
    pub bind: std::net::SocketAddr,
}

pub fn healthcheck(args: HealthArgs) -> ExitCode {
    use std::io::{Read, Write};
    let mut addr = args.bind;
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let probe = || -> std::io::Result<bool> {
        let timeout = std::time::Duration::from_secs(3);
        let mut s = std::net::TcpStream::connect_timeout(&addr, timeout)?;
        s.set_read_timeout(Some(timeout))?;
        s.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes())?;
        let mut buf = String::new();
        s.read_to_string(&mut buf)?;
        Ok(buf.starts_with("HTTP/1.1 200"))
    };
    match probe() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("memlens: {addr}/healthz did not answer 200");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("memlens: {addr}: {e}");
            ExitCode::FAILURE
        }
    }
}
