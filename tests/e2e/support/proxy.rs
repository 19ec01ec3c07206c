//! A TCP proxy that can cut the network: `cut()` drops every open connection and refuses new
//! ones until `heal()`; `retarget()` sends new connections elsewhere (a moved virtual IP). Used
//! to sever the relay from PostgreSQL or Kafka without touching them.

use std::sync::{
    Arc,
    atomic::{AtomicBool, AtomicU16, Ordering},
};

use tokio::{
    net::{TcpListener, TcpStream},
    sync::watch,
};

pub struct Proxy {
    pub port: u16,
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
        let task = {
            let cut = cut.clone();
            let target = target.clone();
            let generation = generation.clone();
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
                    tokio::spawn(async move {
                        let Ok(mut upstream) = TcpStream::connect(("127.0.0.1", target)).await
                        else {
                            return;
                        };
                        let mut client = client;
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
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
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        self.cut();
    }
}
