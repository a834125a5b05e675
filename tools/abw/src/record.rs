//! JSON-lines output records (one object per line on stdout).
//!
//! Estimate record fields: `type` ("estimate"), `index`, `method`,
//! `params`, `direction` ("uplink"|"reverse"), `server`, `estimate_bps`,
//! `low_bps`/`high_bps` (null when the method gives no range),
//! `latency_s` (wall time of this estimate), `start`/`end` (RFC 3339 UTC)
//! and `start_unix_s`/`end_unix_s`, `streams`, `packets_sent`,
//! `packets_received`, `bytes_sent`, `bytes_received` (probe IP bytes),
//! `loss`, `control_bytes`, `rtt_s` (control handshake RTT), `detail`.
//! Error record: `type` ("error"), `error` (message), `kind` (stable:
//! unreachable, control_lost, busy, link_too_slow, no_probes, protocol,
//! config, io), plus `index`, `method` and traffic counters when known.

use serde_json::{json, Value};

use crate::client::{Counters, Outcome};

/// Format ns since the Unix epoch as RFC 3339 UTC with microseconds.
pub fn rfc3339(ns: u64) -> String {
    let secs = (ns / 1_000_000_000) as i64;
    let micros = (ns % 1_000_000_000) / 1000;
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    // civil-from-days (Howard Hinnant's algorithm)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{micros:06}Z",
        sod / 3600,
        (sod / 60) % 60,
        sod % 60
    )
}

/// Common identification of a record.
pub struct Context<'a> {
    pub method: &'a str,
    pub params: Value,
    pub reverse: bool,
    pub server: &'a str,
    pub rtt_s: Option<f64>,
}

fn counters_json(c: &Counters) -> Value {
    let loss = if c.packets_sent > 0 {
        1.0 - (c.packets_received as f64 / c.packets_sent as f64).min(1.0)
    } else {
        0.0
    };
    json!({
        "streams": c.streams,
        "packets_sent": c.packets_sent,
        "packets_received": c.packets_received,
        "bytes_sent": c.bytes_sent,
        "bytes_received": c.bytes_received,
        "loss": loss,
        "control_bytes": c.control_bytes,
    })
}

fn merge(mut a: Value, b: Value) -> Value {
    if let (Some(a), Value::Object(b)) = (a.as_object_mut(), b) {
        a.extend(b);
    }
    a
}

/// Record of a successful estimate.
pub fn estimate_record(index: u64, ctx: &Context, o: &Outcome) -> Value {
    let e = &o.estimate;
    let base = json!({
        "type": "estimate",
        "index": index,
        "method": ctx.method,
        "direction": if ctx.reverse { "reverse" } else { "uplink" },
        "server": ctx.server,
        "estimate_bps": e.estimate_bps.round(),
        "low_bps": e.low_bps.map(f64::round),
        "high_bps": e.high_bps.map(f64::round),
        "latency_s": o.latency_s,
        "start": rfc3339(o.start_ns),
        "end": rfc3339(o.end_ns),
        "start_unix_s": o.start_ns as f64 / 1e9,
        "end_unix_s": o.end_ns as f64 / 1e9,
        "rtt_s": ctx.rtt_s,
        "params": ctx.params,
        "detail": e.detail,
    });
    merge(base, counters_json(&o.counters))
}

/// Record of a failure.
pub fn error_record(
    message: &str,
    kind: &str,
    index: Option<u64>,
    ctx: Option<&Context>,
    counters: Option<&Counters>,
) -> Value {
    let mut v = json!({
        "type": "error",
        "error": message,
        "kind": kind,
        "index": index,
        "time": rfc3339(crate::clock::realtime_ns()),
    });
    if let Some(c) = ctx {
        v = merge(
            v,
            json!({
                "method": c.method,
                "direction": if c.reverse { "reverse" } else { "uplink" },
                "server": c.server,
            }),
        );
    }
    if let Some(c) = counters {
        v = merge(v, counters_json(c));
    }
    v
}

/// Parse a rate such as `10M`, `2.5mbit`, `500k`, `1e6`, `1G` into bit/s.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t
        .trim_end_matches("bit/s")
        .trim_end_matches("bps")
        .trim_end_matches("bit");
    let (num, mult) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 1e3),
        Some('m') => (&t[..t.len() - 1], 1e6),
        Some('g') => (&t[..t.len() - 1], 1e9),
        _ => (t, 1.0),
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("bad rate {s:?} (examples: 500k, 10M, 2.5mbit, 1G)"))?;
    if !(v.is_finite() && v > 0.0) {
        return Err(format!("rate must be positive: {s:?}"));
    }
    Ok(v * mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_known_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(rfc3339(1_700_000_000_123_456_000), "2023-11-14T22:13:20.123456Z");
        assert_eq!(rfc3339(951_782_400_000_000_000), "2000-02-29T00:00:00.000000Z");
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("10M").unwrap(), 10e6);
        assert_eq!(parse_rate("2.5mbit").unwrap(), 2.5e6);
        assert_eq!(parse_rate("500k").unwrap(), 500e3);
        assert_eq!(parse_rate("1G").unwrap(), 1e9);
        assert_eq!(parse_rate("123456").unwrap(), 123456.0);
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("-1M").is_err());
    }
}
