//! `testbed-flows [--bin-ns N] [--max-flow-bins N] [--max-capture-bins N]
//! [--max-connections N] CAPTURE`: the per-TCP-flow figures of a pcap or pcapng file as
//! one JSON document on stdout (see `flows::analysis::CaptureFigures`). The
//! orchestrator's ingest runs it, passing the bounds it defines (flows.py; the defaults
//! here are the same), and turns the document into its `FlowStats`.
//!
//! Exit status 0 with the document (a damaged capture gives the flows before the damage
//! and a `damage` member); 0 with `{"error": ...}` when the file is not a capture at
//! all; 2 on a usage error; 1 when the file cannot be read.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use flows::analysis::{analyse_file, Bounds};
use flows::reader::OpenError;

const USAGE: &str = "usage: testbed-flows [--bin-ns NANOSECONDS] [--max-flow-bins N] \
                     [--max-capture-bins N] [--max-connections N] CAPTURE.pcap|CAPTURE.pcapng";

/// The value after a flag, when it is a whole number of at least 1.
fn positive<T: std::str::FromStr + PartialOrd + From<u8>>(
    args: &mut impl Iterator<Item = std::ffi::OsString>,
) -> Option<T> {
    let v: T = args.next()?.to_str()?.parse().ok()?;
    (v >= T::from(1)).then_some(v)
}

fn main() -> ExitCode {
    let mut bin_ns: i64 = 100_000_000;
    let mut bounds = Bounds::default();
    let mut path: Option<PathBuf> = None;
    let mut args = std::env::args_os().skip(1);
    while let Some(arg) = args.next() {
        match arg.to_str() {
            Some("--bin-ns") => match positive(&mut args) {
                Some(n) => bin_ns = n,
                None => return usage("--bin-ns needs a positive whole number of nanoseconds"),
            },
            Some(flag @ ("--max-flow-bins" | "--max-capture-bins" | "--max-connections")) => {
                let Some(n) = positive::<u32>(&mut args) else {
                    return usage(&format!("{flag} needs a whole number from 1 to 2^32 - 1"));
                };
                match flag {
                    "--max-flow-bins" => bounds.flow_bins = i64::from(n),
                    "--max-capture-bins" => bounds.capture_bins = i64::from(n),
                    _ => bounds.connections = n as usize,
                }
            }
            Some("-h" | "--help") => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            _ if path.is_none() => path = Some(PathBuf::from(arg)),
            _ => return usage("one capture file at a time"),
        }
    }
    let Some(path) = path else {
        return usage("no capture file given");
    };
    let doc = match analyse_file(&path, bin_ns, bounds) {
        Ok(figures) => serde_json::to_vec(&figures),
        Err(OpenError::NotACapture(e)) => serde_json::to_vec(&serde_json::json!({
            "error": e.message, "offset": e.offset, "packets_read": e.packets_read,
        })),
        Err(OpenError::Io(e)) => {
            eprintln!("testbed-flows: cannot read {}: {e}", path.display());
            return ExitCode::from(1);
        }
    };
    let mut out = std::io::stdout().lock();
    match doc.map(|d| out.write_all(&d).and_then(|()| out.write_all(b"\n"))) {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => {
            eprintln!("testbed-flows: writing the result: {e}");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("testbed-flows: encoding the result: {e}");
            ExitCode::from(1)
        }
    }
}

fn usage(why: &str) -> ExitCode {
    eprintln!("testbed-flows: {why}\n{USAGE}");
    ExitCode::from(2)
}
