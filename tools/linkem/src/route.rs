//! Where a moving node is: a path of waypoints travelled at a constant speed,
//! back and forth (a train or a bus on its line), so the emulated GPS of a
//! moving node reports positions that change with the emulator's time.
//!
//! Pure: the position is a function of the time since the epoch. Distances
//! are great-circle (haversine) between waypoints; inside a segment the
//! position is interpolated linearly in latitude and longitude, which is
//! within metres of the great circle for segments of a few kilometres.

use serde::Serialize;

use crate::{Nanos, NS_PER_S};

/// Mean Earth radius (IUGG), metres.
const EARTH_RADIUS_M: f64 = 6_371_008.8;

/// A position fix as the emulated GPS reports it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Position {
    /// Degrees north.
    pub lat: f64,
    /// Degrees east.
    pub lon: f64,
    /// Ground speed, m/s.
    pub speed_mps: f64,
    /// Degrees clockwise from true north, 0..360.
    pub heading_deg: f64,
}

/// A validated route.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    points: Vec<(f64, f64)>,
    /// Cumulative distance at each waypoint, metres (first is 0).
    cumulative_m: Vec<f64>,
    speed_mps: f64,
}

/// Great-circle distance between two (lat, lon) points in degrees, metres.
pub fn haversine_m(a: (f64, f64), b: (f64, f64)) -> f64 {
    let (la1, lo1) = (a.0.to_radians(), a.1.to_radians());
    let (la2, lo2) = (b.0.to_radians(), b.1.to_radians());
    let h = ((la2 - la1) / 2.0).sin().powi(2)
        + la1.cos() * la2.cos() * ((lo2 - lo1) / 2.0).sin().powi(2);
    2.0 * EARTH_RADIUS_M * h.sqrt().min(1.0).asin()
}

/// Initial bearing from `a` to `b`, degrees clockwise from north in [0, 360).
fn bearing_deg(a: (f64, f64), b: (f64, f64)) -> f64 {
    let (la1, la2) = (a.0.to_radians(), b.0.to_radians());
    let dlo = (b.1 - a.1).to_radians();
    let y = dlo.sin() * la2.cos();
    let x = la1.cos() * la2.sin() - la1.sin() * la2.cos() * dlo.cos();
    (y.atan2(x).to_degrees() + 360.0) % 360.0
}

impl Route {
    /// A route through `points` (lat, lon in degrees) at `speed_mps`.
    /// Needs at least two distinct points and a positive speed.
    pub fn new(points: Vec<(f64, f64)>, speed_mps: f64) -> Result<Self, String> {
        if points.len() < 2 {
            return Err(format!("route.waypoints has {} point(s); a route needs at least 2", points.len()));
        }
        for (i, (lat, lon)) in points.iter().enumerate() {
            if !(lat.is_finite() && (-90.0..=90.0).contains(lat)) {
                return Err(format!("route.waypoints[{i}]: latitude {lat} is not in [-90, 90]"));
            }
            if !(lon.is_finite() && (-180.0..=180.0).contains(lon)) {
                return Err(format!("route.waypoints[{i}]: longitude {lon} is not in [-180, 180]"));
            }
        }
        if !(speed_mps.is_finite() && speed_mps > 0.0) {
            return Err(format!("route.speed_kmh must be positive, not {}", speed_mps * 3.6));
        }
        let mut cumulative_m = vec![0.0];
        for w in points.windows(2) {
            let last = *cumulative_m.last().unwrap_or(&0.0);
            cumulative_m.push(last + haversine_m(w[0], w[1]));
        }
        if *cumulative_m.last().unwrap_or(&0.0) <= 0.0 {
            return Err("route.waypoints are all the same point; a route must go somewhere".into());
        }
        Ok(Self { points, cumulative_m, speed_mps })
    }

    /// Length of the route one way, metres.
    pub fn length_m(&self) -> f64 {
        *self.cumulative_m.last().unwrap_or(&0.0)
    }

    /// The position at `now`: out along the waypoints, then back, for ever.
    pub fn position_at(&self, now: Nanos) -> Position {
        let length = self.length_m();
        let travelled = self.speed_mps * now as f64 / NS_PER_S as f64;
        let lap = travelled % (2.0 * length);
        let (along, outbound) = if lap <= length { (lap, true) } else { (2.0 * length - lap, false) };
        // The segment holding `along`: the last waypoint at or before it.
        let seg = self
            .cumulative_m
            .partition_point(|c| *c <= along)
            .clamp(1, self.points.len() - 1)
            - 1;
        let (a, b) = (self.points[seg], self.points[seg + 1]);
        let span = self.cumulative_m[seg + 1] - self.cumulative_m[seg];
        let f = if span > 0.0 { ((along - self.cumulative_m[seg]) / span).clamp(0.0, 1.0) } else { 0.0 };
        let heading = if outbound { bearing_deg(a, b) } else { bearing_deg(b, a) };
        Position {
            lat: a.0 + (b.0 - a.0) * f,
            lon: a.1 + (b.1 - a.1) * f,
            speed_mps: self.speed_mps,
            heading_deg: (heading * 10.0).round() / 10.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OSLO: (f64, f64) = (59.9111, 10.7528);
    const LILLESTROM: (f64, f64) = (59.9560, 11.0504);

    #[test]
    fn haversine_matches_arcs_of_known_length() {
        // One degree along a meridian, and along the equator, is R * pi / 180.
        let degree = EARTH_RADIUS_M * std::f64::consts::PI / 180.0;
        assert!((haversine_m((10.0, 5.0), (11.0, 5.0)) - degree).abs() < 1e-6);
        assert!((haversine_m((0.0, 5.0), (0.0, 6.0)) - degree).abs() < 1e-6);
        // Along a parallel at 60 degrees north, a degree of longitude is half as
        // long (the great circle is a little shorter than the parallel).
        let d = haversine_m((60.0, 10.0), (60.0, 11.0));
        assert!(d < degree / 2.0 && d > degree / 2.0 * 0.999, "{d}");
    }

    #[test]
    fn travels_out_then_back_at_the_set_speed() {
        let r = Route::new(vec![OSLO, LILLESTROM], 25.0).unwrap();
        let start = r.position_at(0);
        assert_eq!((start.lat, start.lon), OSLO);
        let one_way_s = r.length_m() / 25.0;
        let end = r.position_at((one_way_s * NS_PER_S as f64) as Nanos);
        assert!(haversine_m((end.lat, end.lon), LILLESTROM) < 1.0, "{end:?}");
        // Heading: east-north-east out, west-south-west back.
        let out = r.position_at(10 * NS_PER_S);
        let back = r.position_at(((one_way_s + 10.0) * NS_PER_S as f64) as Nanos);
        assert!((60.0..80.0).contains(&out.heading_deg), "{out:?}");
        assert!((240.0..260.0).contains(&back.heading_deg), "{back:?}");
        // Ten seconds of travel move the node ~250 m.
        let moved = haversine_m((start.lat, start.lon), (out.lat, out.lon));
        assert!((moved - 250.0).abs() < 5.0, "{moved}");
        let home = r.position_at((2.0 * one_way_s * NS_PER_S as f64) as Nanos);
        assert!(haversine_m((home.lat, home.lon), OSLO) < 1.0, "{home:?}");
    }

    #[test]
    fn follows_each_segment_of_a_polyline() {
        let r = Route::new(vec![(0.0, 0.0), (0.0, 0.01), (0.01, 0.01)], 10.0).unwrap();
        let first_leg_s = haversine_m((0.0, 0.0), (0.0, 0.01)) / 10.0;
        let corner = r.position_at((first_leg_s * NS_PER_S as f64) as Nanos);
        assert!(haversine_m((corner.lat, corner.lon), (0.0, 0.01)) < 1.0, "{corner:?}");
        let north = r.position_at(((first_leg_s + 20.0) * NS_PER_S as f64) as Nanos);
        assert!((north.lon - 0.01).abs() < 1e-9 && north.lat > 0.0, "{north:?}");
        assert!(north.heading_deg < 1.0 || north.heading_deg > 359.0, "{north:?}");
    }

    #[test]
    fn refuses_routes_that_go_nowhere() {
        assert!(Route::new(vec![OSLO], 10.0).unwrap_err().contains("at least 2"));
        assert!(Route::new(vec![OSLO, OSLO], 10.0).unwrap_err().contains("same point"));
        assert!(Route::new(vec![OSLO, (95.0, 0.0)], 10.0).unwrap_err().contains("latitude"));
        assert!(Route::new(vec![OSLO, LILLESTROM], 0.0).unwrap_err().contains("positive"));
    }
}
