//! A TCP proxy that can cut the network: `cut()` drops every open connection and refuses new
//! ones until `heal()`; `retarget()` sends new connections elsewhere (a moved virtual IP);
//! `freeze()` is a silent partition: connections stay open but no byte (nor a close) passes
//! either way until `thaw()`, which delivers what was held, as TCP would after a partition
//! heals. Used to sever the relay from PostgreSQL or Kafka without touching them.

use std::sync::{
    Arc,
    atomic::{AtomicBool, AtomicU16, Ordering},
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{
        TcpListener, TcpStream,
        tcp::{OwnedReadHalf, OwnedWriteHalf},
    },
    sync::watch,
};

pub struct Proxy {
    pub port: u16,
    frozen: watch::Sender<bool>,
    cut: Arc<AtomicBool>,
    target: Arc<AtomicU16>,
    generation: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on 127.0.0.1:`port` (0 = any free port) and forwards to 127.0.0.1:`target`.
    pub async fn start(port: u16, target: u16) -> Proxy {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("bind proxy port");
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let target = Arc::new(AtomicU16::new(target));
        let (generation, _) = watch::channel(0u64);
        let (frozen, _) = watch::channel(false);
        let task = {
            let cut = cut.clone();
            let target = target.clone();
            let generation = generation.clone();
            let frozen = frozen.clone();
            tokio::spawn(async move {
                loop {
                    let Ok((client, _)) = listener.accept().await else {
                        continue;
                    };
                    if cut.load(Ordering::SeqCst) {
                        drop(client);
                        continue;
                    }
                    let mut gen_rx = generation.subscribe();
                    let born = *gen_rx.borrow_and_update();
                    let target = target.load(Ordering::SeqCst);
                    let (up, down) = (frozen.subscribe(), frozen.subscribe());
                    tokio::spawn(async move {
                        let Ok(upstream) = TcpStream::connect(("127.0.0.1", target)).await else {
                            return;
                        };
                        let (client_r, client_w) = client.into_split();
                        let (upstream_r, upstream_w) = upstream.into_split();
                        tokio::select! {
                            _ = async {
                                tokio::join!(
                                    pump(client_r, upstream_w, up),
                                    pump(upstream_r, client_w, down)
                                )
                            } => {}
                            _ = async {
                                while gen_rx.changed().await.is_ok() {
                                    if *gen_rx.borrow() != born { break; }
                                }
                            } => {}
                        }
                    });
                }
            })
        };
        Proxy {
            port,
            frozen,
            cut,
            target,
            generation,
            task,
        }
    }

    /// Drops every connection and refuses new ones.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    /// Drops every connection; new ones go to `port`.
    pub fn retarget(&self, port: u16) {
        self.target.store(port, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    pub fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }

    /// A silent partition: nothing passes, nothing is closed.
    pub fn freeze(&self) {
        self.frozen.send_replace(true);
    }

    /// Ends [`freeze`](Self::freeze): what was held is delivered.
    pub fn thaw(&self) {
        self.frozen.send_replace(false);
    }
}

/// Copies one direction, holding every chunk (and the end of the stream) while frozen.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut frozen: watch::Receiver<bool>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = from.read(&mut buf).await.unwrap_or(0);
        if frozen.wait_for(|f| !*f).await.is_err() {
            return;
        }
        if n == 0 || to.write_all(&buf[..n]).await.is_err() {
            let _ = to.shutdown().await;
            return;
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        self.cut();
    }
}
