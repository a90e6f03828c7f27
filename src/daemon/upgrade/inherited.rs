//! The new process's side of an upgrade: what it was handed (the [`Process`] part, at start),
//! the session it asks for, and the device it takes over (steps 1 and 5 of the module doc of
//! `upgrade`).

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use super::handover::{self, Answer, Process, Session};
use super::marks::Marks;
use super::{launcher, replay, Relay, ANSWER};

/// What a process started for an upgrade was handed, and the connection it came on.
pub struct Inherited {
    pub process: Process,
    sock: UnixStream,
}

impl Inherited {
    /// When this process was started by a launcher: what it starts with. Call while the
    /// process has one thread. What cannot be read is refused (the old process serves on) and
    /// is an error here.
    pub fn take() -> Result<Option<Inherited>, String> {
        let Some(sock) = launcher::take_handover() else {
            return Ok(None);
        };
        match handover::recv_process(&sock) {
            Ok(process) => Ok(Some(Inherited { process, sock })),
            Err(e) => {
                let why = e.to_string();
                let _ = handover::answer(&sock, Answer::Refused(&why));
                Err(format!("upgrade: {why}"))
            }
        }
    }

    /// Under `--sandbox=namespace`: the namespaces of the old daemon, which this one joins;
    /// refused when the old one sent none.
    pub fn namespaces(&mut self) -> Result<crate::sandbox::Join, String> {
        let Some(mount) = self.process.mount_ns.take() else {
            return Err(self.refuse(
                "upgrade: the old daemon sent no mount namespace to join (it runs under another \
                 --sandbox)",
            ));
        };
        let user = self.process.user_ns.take();
        Ok(crate::sandbox::Join { mount, user })
    }

    /// Refuses the hand-over: the old process serves on.
    pub(super) fn refuse(&self, why: &str) -> String {
        let _ = handover::answer(&self.sock, Answer::Refused(why));
        why.to_string()
    }

    /// Asks for the session (the old process stops its queues then) and receives it.
    pub(super) fn session(&self) -> Result<Session, String> {
        handover::answer(&self.sock, Answer::Waiting)
            .map_err(|e| format!("the hand-over connection: {e}"))?;
        let _ = self.sock.set_read_timeout(Some(ANSWER));
        handover::recv_session(&self.sock).map_err(|e| self.refuse(&e.to_string()))
    }

    /// Takes the device over: replays the set-up into the handler on `handler` (the relay's
    /// end of its private connection), answers the old process, waits until it is gone,
    /// kicks the vrings and starts relaying. On an error the old process serves on.
    pub(super) fn adopt(
        self,
        handler: UnixStream,
        session: Session,
        mut marks: Marks,
    ) -> Result<Arc<Relay>, String> {
        let Session {
            setup, frontend, ..
        } = session;
        let replayed = setup
            .replay()
            .and_then(|msgs| replay(&handler, &setup, &msgs));
        if let Err(e) = replayed {
            return Err(self.refuse(&format!("replaying the device set-up: {e}")));
        }
        marks.mark("set-up replayed");
        handover::answer(&self.sock, Answer::Ready)
            .map_err(|e| format!("the hand-over connection: {e}"))?;
        // The old process exits at once: the end of the connection says it is gone.
        let _ = (&self.sock).read(&mut [0u8; 1]);
        marks.mark("old process gone");
        setup.kick();
        let paused_ms = marks.elapsed_ms();
        marks.log("new process");
        log::info!(
            "took over the vhost-user connection: the queues stood still for {paused_ms:.1} ms"
        );
        Relay::new(UnixStream::from(frontend), handler, setup).map_err(|e| format!("relay: {e}"))
    }
}
