//! Raw UDP over loopback (127.0.0.1) as a hardware/OS limit: two threads of
//! this process pinned to CPUs 0 and 1, plain blocking `std::net::UdpSocket`
//! calls, no library in between.
//!
//! * ping-pong: 8 B datagram there and back (full round trip);
//! * stream: one side sends datagrams of one size as fast as `send` allows,
//!   the other receives; MB/s = bytes received / time from the first to the
//!   last datagram received (loss is reported, not retried).

use crate::harness::pin::pin_to_cpu;
use crate::harness::stats::p50_p99;
use std::net::UdpSocket;
use std::time::{Duration, Instant};

fn pair() -> std::io::Result<(UdpSocket, UdpSocket)> {
    let a = UdpSocket::bind("127.0.0.1:0")?;
    let b = UdpSocket::bind("127.0.0.1:0")?;
    a.connect(b.local_addr()?)?;
    b.connect(a.local_addr()?)?;
    Ok((a, b))
}

fn pin(cpu: usize) {
    if let Err(e) = pin_to_cpu(cpu) {
        eprintln!("warning: could not pin a UDP thread to CPU {cpu}: {e}");
    }
}

/// 8 B ping-pongs: `warm` untimed, then `batches` batches of `batch`;
/// returns (p50, p99) of the per-batch mean round trip, in us.
pub fn ping_pong(warm: usize, batch: usize, batches: usize) -> Result<(f64, f64), String> {
    let (a, b) = pair().map_err(|e| format!("UDP sockets: {e}"))?;
    let total = warm + batch * batches;
    for s in [&a, &b] {
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
    }
    let echo = std::thread::spawn(move || -> Result<(), String> {
        pin(1);
        let mut buf = [0u8; 64];
        for _ in 0..total {
            let n = b
                .recv(&mut buf)
                .map_err(|e| format!("UDP echo recv: {e}"))?;
            b.send(&buf[..n])
                .map_err(|e| format!("UDP echo send: {e}"))?;
        }
        Ok(())
    });
    let ping = std::thread::spawn(move || -> Result<Vec<f64>, String> {
        pin(0);
        let mut buf = [0u8; 64];
        let msg = [7u8; 8];
        let mut one = || -> Result<(), String> {
            a.send(&msg).map_err(|e| format!("UDP send: {e}"))?;
            a.recv(&mut buf).map_err(|e| format!("UDP recv: {e}"))?;
            Ok(())
        };
        for _ in 0..warm {
            one()?;
        }
        let mut means = Vec::with_capacity(batches);
        let mut t = Instant::now();
        for _ in 0..batches {
            for _ in 0..batch {
                one()?;
            }
            let now = Instant::now();
            means.push((now - t).as_secs_f64() * 1e6 / batch as f64);
            t = now;
        }
        Ok(means)
    });
    let means = ping.join().map_err(|_| "UDP ping thread panicked")??;
    echo.join().map_err(|_| "UDP echo thread panicked")??;
    Ok(p50_p99(&means))
}

/// Stream `count` datagrams of `size` bytes; returns (MB/s received, loss
/// in percent).
pub fn stream(size: usize, count: usize) -> Result<(f64, f64), String> {
    let (a, b) = pair().map_err(|e| format!("UDP sockets: {e}"))?;
    b.set_read_timeout(Some(Duration::from_millis(200)))
        .map_err(|e| e.to_string())?;
    let rx = std::thread::spawn(move || -> (usize, Option<Duration>) {
        pin(1);
        let mut buf = vec![0u8; size.max(64)];
        let (mut got, mut first, mut last) = (0usize, None::<Instant>, None::<Instant>);
        while got < count {
            match b.recv(&mut buf) {
                Ok(_) => {
                    let now = Instant::now();
                    first.get_or_insert(now);
                    last = Some(now);
                    got += 1;
                }
                Err(_) => break,
            }
        }
        (got, first.zip(last).map(|(f, l)| l - f))
    });
    let tx = std::thread::spawn(move || -> Result<(), String> {
        pin(0);
        std::thread::sleep(Duration::from_millis(20));
        let msg = vec![3u8; size];
        for _ in 0..count {
            // ECONNREFUSED / ENOBUFS on loopback count as loss.
            let _ = a.send(&msg);
        }
        Ok(())
    });
    tx.join().map_err(|_| "UDP sender thread panicked")??;
    let (got, span) = rx.join().map_err(|_| "UDP receiver thread panicked")?;
    let span = span
        .filter(|_| got > 1)
        .ok_or("UDP stream: nothing received")?;
    // got - 1 inter-arrival gaps between the first and the last datagram.
    let mbs = ((got - 1) * size) as f64 / span.as_secs_f64() / 1e6;
    let loss = 100.0 * (count - got) as f64 / count as f64;
    Ok((mbs, loss))
}
