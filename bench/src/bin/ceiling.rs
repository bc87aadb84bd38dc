//! The ceiling for ingestion benchmarks: a bare warp 0.4 server that parses the
//! same JSON body the collector gets and answers 202, with nothing else.
//! Usage: ceiling ADDR:PORT (prints "listening on http://ADDR" when ready).

use warp::Filter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let addr: std::net::SocketAddr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:0".into()).parse()?;
    let route = warp::path!("v1" / "events" / "track").and(warp::post()).and(warp::body::bytes()).map(|body: bytes::Bytes| {
        match serde_json::from_slice::<serde_json::Value>(&body) {
            Ok(v) if v.get("session_id").is_some() => warp::reply::with_status("{}", warp::http::StatusCode::ACCEPTED),
            _ => warp::reply::with_status("{}", warp::http::StatusCode::BAD_REQUEST),
        }
    });
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    warp::serve(route).incoming(listener).run().await;
    Ok(())
}
