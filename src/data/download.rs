//! `--download`: a dataset's published archive (CIFAR's binary versions) fetched over HTTPS into
//! a cache directory, checked against its published MD5, and the files the loader reads
//! unpacked into the folder `--data` names. Nothing half-done is left where it would be taken
//! for whole: the download goes to `<file>.part-<host>-<pid>` (a cache shared over NFS by the
//! processes of a run on several machines stays apart) and is renamed once its checksum holds,
//! and each unpacked file is written beside its place and renamed. A cached archive whose
//! checksum holds is not fetched again.

use std::fs::File;
use std::io::{self, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use md5::{Digest, Md5};

/// What to fetch and what to take from it.
#[derive(Clone, Debug)]
pub struct Archive {
    /// Where it is published.
    pub url: String,
    /// Its published MD5, lowercase hex.
    pub md5: String,
    /// Its size in bytes: what a download may not exceed (by more than a little).
    pub size: u64,
    /// The folder it unpacks to (`cifar-10-batches-bin`); only the members named in `files`
    /// inside it are taken.
    pub folder: String,
    pub files: Vec<String>,
}

impl Archive {
    /// The file name the URL ends in.
    pub fn file_name(&self) -> &str {
        self.url.rsplit('/').next().unwrap_or("archive")
    }
}

/// Where archives are kept: `$XDG_CACHE_HOME/mgtop/datasets`, `~/.cache/mgtop/datasets`, else
/// one under the temporary directory named for the user.
pub fn cache_dir() -> PathBuf {
    crate::files::write::cache_dir("datasets")
}

fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// The MD5 of a file.
fn md5_of(path: &Path) -> io::Result<String> {
    let mut f = BufReader::new(File::open(path)?);
    let mut h = Md5::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match f.read(&mut buf)? {
            0 => return Ok(hex(&h.finalize())),
            n => h.update(&buf[..n]),
        }
    }
}

/// Fetches `a` (unless the cache holds it whole) and unpacks its files into `into/<folder>`;
/// that folder. `tell` hears progress lines.
pub fn fetch(
    a: &Archive,
    cache: &Path,
    into: &Path,
    tell: &dyn Fn(&str),
) -> Result<PathBuf, String> {
    let cached = cache.join(a.file_name());
    let whole = cached.is_file() && md5_of(&cached).is_ok_and(|m| m == a.md5);
    if whole {
        tell(&format!(
            "--download: {} is in the cache ({})",
            a.file_name(),
            cached.display()
        ));
    } else {
        download(a, &cached, tell).map_err(|e| match e.contains("download it yourself") {
            // by hand: how to unpack it where it is read
            true => format!(
                "{e} and unpack it: mkdir -p {d} && tar xzf {} -C {d}",
                a.file_name(),
                d = into.display()
            ),
            false => e,
        })?;
    }
    unpack(a, &cached, into)
}

/// The download's name while it comes: `<file>.part-<host>-<pid>`; `pid` `None` for the prefix
/// of this machine's.
fn part_name(file: &str, pid: Option<u32>) -> String {
    let host = crate::pids::hostname().replace(['/', '-'], "_");
    format!(
        "{file}.part-{host}-{}",
        pid.map_or(String::new(), |p| p.to_string())
    )
}

/// Removes what earlier, interrupted downloads of this file on this machine left (their
/// processes are gone).
fn clear_leftovers(cache: &Path, name: &str) {
    let Ok(entries) = std::fs::read_dir(cache) else {
        return;
    };
    let prefix = part_name(name, None);
    for e in entries.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        let pid = n.strip_prefix(&prefix).and_then(|p| p.parse::<u32>().ok());
        let Some(pid) = pid.filter(|&p| p > 0) else {
            continue;
        };
        if crate::pids::gone(pid) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

fn download(a: &Archive, to: &Path, tell: &dyn Fn(&str)) -> Result<(), String> {
    let dir = to.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| {
        format!(
            "--download: cannot make the cache directory {} ({e})",
            dir.display()
        )
    })?;
    clear_leftovers(dir, a.file_name());
    let part = dir.join(part_name(a.file_name(), Some(std::process::id())));
    let result = fetch_to(a, &part, tell);
    if result.is_err() {
        let _ = std::fs::remove_file(&part);
    }
    let md5 = result?;
    if md5 != a.md5 {
        let _ = std::fs::remove_file(&part);
        return Err(format!(
            "--download: {} arrived with MD5 {md5}, but the published one is {}: it was damaged on the way or changed; try again, or download it yourself from {}",
            a.file_name(),
            a.md5,
            a.url
        ));
    }
    std::fs::rename(&part, to)
        .map_err(|e| format!("--download: cannot keep {} ({e})", to.display()))
}

/// Streams the body into `part`; its MD5.
fn fetch_to(a: &Archive, part: &Path, tell: &dyn Fn(&str)) -> Result<String, String> {
    let fail = |e: &dyn std::fmt::Display| {
        format!(
            "--download: cannot fetch {} ({e}); check the connection (or a proxy: HTTPS_PROXY), or download it yourself",
            a.url
        )
    };
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(Duration::from_secs(30)))
        .timeout_recv_response(Some(Duration::from_secs(60)))
        // a server that stalls is given up on (30 minutes is 90 kB/s for CIFAR's 162 MB)
        .timeout_recv_body(Some(Duration::from_secs(30 * 60)))
        .user_agent(concat!("mgtop-train/", env!("CARGO_PKG_VERSION")))
        .build()
        .into();
    let response = agent.get(&a.url).call().map_err(|e| fail(&e))?;
    let declared = response
        .headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    // a little more than the published size, so a wrong or hostile answer cannot fill the disk
    let most = a.size + a.size / 8 + (1 << 20);
    if declared.is_some_and(|d| d > most) {
        return Err(fail(&format!(
            "it says {} bytes; the archive is {}",
            declared.unwrap_or(0),
            a.size
        )));
    }
    let total = declared.unwrap_or(a.size).max(1);
    tell(&format!(
        "--download: fetching {} ({:.0} MB) into {}",
        a.url,
        total as f64 / 1e6,
        part.parent().unwrap_or(Path::new(".")).display()
    ));
    let mut body = response.into_body().into_with_config().limit(most).reader();
    let mut out = File::create(part).map_err(|e| fail(&format!("{}: {e}", part.display())))?;
    let mut h = Md5::new();
    let mut buf = vec![0u8; 1 << 16];
    let (mut got, mut said, t0) = (0u64, 0u64, Instant::now());
    loop {
        let n = match body.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(fail(&e)),
        };
        h.update(&buf[..n]);
        out.write_all(&buf[..n])
            .map_err(|e| fail(&format!("{}: {e}", part.display())))?;
        got += n as u64;
        // a line every 10%
        if got * 10 / total > said && got < total {
            said = got * 10 / total;
            let secs = t0.elapsed().as_secs_f64().max(1e-3);
            tell(&format!(
                "--download: {}% ({:.0} of {:.0} MB, {:.1} MB/s)",
                said * 10,
                got as f64 / 1e6,
                total as f64 / 1e6,
                got as f64 / 1e6 / secs
            ));
        }
    }
    if declared.is_some_and(|d| d != got) {
        return Err(fail(&format!(
            "the connection ended after {got} of {} bytes",
            declared.unwrap_or(0)
        )));
    }
    out.sync_all().map_err(|e| fail(&e))?;
    Ok(hex(&h.finalize()))
}

/// Writes the archive's files (only those named, only regular files, by their file name alone:
/// no member can write outside `into`) into `into/<folder>`.
fn unpack(a: &Archive, archive: &Path, into: &Path) -> Result<PathBuf, String> {
    let folder = into.join(&a.folder);
    let bad = |e: &dyn std::fmt::Display| {
        format!(
            "--download: cannot unpack {} into {} ({e})",
            archive.display(),
            folder.display()
        )
    };
    std::fs::create_dir_all(&folder).map_err(|e| bad(&e))?;
    let file = File::open(archive).map_err(|e| bad(&e))?;
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(BufReader::new(file)));
    let mut found = Vec::new();
    for entry in tar.entries().map_err(|e| bad(&e))? {
        let mut entry = entry.map_err(|e| bad(&e))?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let path = entry.path().map_err(|e| bad(&e))?.into_owned();
        let Some(name) = path.file_name().and_then(|n| n.to_str()).map(String::from) else {
            continue;
        };
        if !a.files.contains(&name) || found.contains(&name) {
            continue;
        }
        let tmp = folder.join(format!(".{name}.part-{}", std::process::id()));
        let copied = File::create(&tmp).and_then(|mut out| {
            io::copy(&mut entry, &mut out)?;
            out.sync_all()
        });
        if let Err(e) = copied.and_then(|()| std::fs::rename(&tmp, folder.join(&name))) {
            let _ = std::fs::remove_file(&tmp);
            return Err(bad(&e));
        }
        found.push(name);
    }
    let missing: Vec<&String> = a.files.iter().filter(|f| !found.contains(f)).collect();
    if !missing.is_empty() {
        return Err(bad(&format!(
            "the archive lacks {}",
            missing
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(folder)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::net::TcpListener;

    pub(crate) fn md5_hex(bytes: &[u8]) -> String {
        hex(&Md5::digest(bytes))
    }

    /// A tar.gz holding `members` (path, bytes).
    pub(crate) fn targz(members: &[(&str, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(flate2::write::GzEncoder::new(
            Vec::new(),
            flate2::Compression::fast(),
        ));
        for (path, data) in members {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_entry_type(tar::EntryType::Regular);
            // set by hand: `set_path` refuses `..`, which a hostile archive may hold
            let name = h.as_gnu_mut().unwrap();
            name.name[..path.len()].copy_from_slice(path.as_bytes());
            h.set_cksum();
            b.append(&h, *data).unwrap();
        }
        b.into_inner().unwrap().finish().unwrap()
    }

    /// Serves `body` to each connection (claiming `declared` bytes) on a port of its own; the
    /// base URL and how many requests it served.
    pub(crate) fn serve(
        body: Vec<u8>,
        declared: usize,
    ) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let served = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = served.clone();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { continue };
                let mut head = [0u8; 4096];
                let _ = s.read(&mut head);
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let status = if head.starts_with(b"GET /x.tar.gz ") {
                    "200 OK"
                } else {
                    "404 Not Found"
                };
                let _ = write!(
                    s,
                    "HTTP/1.1 {status}\r\nContent-Length: {declared}\r\nConnection: close\r\n\r\n"
                );
                let _ = s.write_all(&body);
            }
        });
        (url, served)
    }

    fn archive(url: &str, body: &[u8]) -> Archive {
        Archive {
            url: format!("{url}/x.tar.gz"),
            md5: md5_hex(body),
            size: body.len() as u64,
            folder: "set-bin".into(),
            files: vec!["a.bin".into(), "b.txt".into()],
        }
    }

    #[test]
    fn a_killed_downloads_leftover_goes_and_a_running_ones_stays() {
        let dir = tempfile::tempdir().unwrap();
        // a process that has ended
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        let dead = dir.path().join(part_name("x.tar.gz", Some(gone)));
        let alive = dir
            .path()
            .join(part_name("x.tar.gz", Some(std::process::id())));
        let elsewhere = dir.path().join("x.tar.gz.part-otherhost-1");
        for f in [&dead, &alive, &elsewhere] {
            std::fs::write(f, b"partial").unwrap();
        }
        clear_leftovers(dir.path(), "x.tar.gz");
        assert!(!dead.exists() && alive.exists() && elsewhere.exists());
    }

    #[test]
    fn md5_is_the_published_kind() {
        assert_eq!(md5_hex(b"abc"), "900150983cd24fb0d6963f7d28e17f72");
    }

    #[test]
    fn an_archive_is_fetched_checked_cached_and_only_its_named_files_unpacked() {
        let body = targz(&[
            ("set-bin/a.bin", b"AAAA"),
            ("set-bin/b.txt", b"names"),
            ("set-bin/other.bin", b"not asked for"),
            ("../../escape.bin", b"a hostile path"),
        ]);
        let (url, served) = serve(body.clone(), body.len());
        let a = archive(&url, &body);
        let dir = tempfile::tempdir().unwrap();
        let (cache, into) = (dir.path().join("cache"), dir.path().join("data"));
        let lines = std::cell::RefCell::new(Vec::new());
        let tell = |l: &str| lines.borrow_mut().push(l.to_string());
        let got = fetch(&a, &cache, &into, &tell).unwrap();
        assert_eq!(got, into.join("set-bin"));
        assert_eq!(std::fs::read(got.join("a.bin")).unwrap(), b"AAAA");
        assert_eq!(std::fs::read(got.join("b.txt")).unwrap(), b"names");
        assert!(!got.join("other.bin").exists());
        assert!(!dir.path().join("escape.bin").exists() && !into.join("escape.bin").exists());
        assert_eq!(std::fs::read(cache.join("x.tar.gz")).unwrap(), body);
        assert!(
            lines.borrow()[0].contains("fetching"),
            "{:?}",
            lines.borrow()
        );
        // again: from the cache, no request
        std::fs::remove_dir_all(&into).unwrap();
        fetch(&a, &cache, &into, &tell).unwrap();
        assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(lines.borrow().last().unwrap().contains("in the cache"));
    }

    #[test]
    fn a_wrong_checksum_a_short_body_a_404_or_a_missing_member_leave_nothing_behind() {
        let body = targz(&[("set-bin/a.bin", b"AAAA"), ("set-bin/b.txt", b"n")]);
        let dir = tempfile::tempdir().unwrap();
        let (cache, into) = (dir.path().join("cache"), dir.path().join("data"));
        let quiet = |_: &str| {};
        let left = || std::fs::read_dir(&cache).map_or(0, |d| d.count());

        let (url, _) = serve(body.clone(), body.len());
        let mut a = archive(&url, &body);
        a.md5 = "0".repeat(32);
        let e = fetch(&a, &cache, &into, &quiet).unwrap_err();
        assert!(
            e.contains("MD5") && e.contains("published one is 0000"),
            "{e}"
        );
        assert_eq!(left(), 0, "a download that fails its checksum is removed");

        let (url, _) = serve(body[..body.len() / 2].to_vec(), body.len());
        let e = fetch(&archive(&url, &body), &cache, &into, &quiet).unwrap_err();
        // ureq notices the short body itself, else the length check does
        assert!(
            e.contains("ended after") || e.contains("disconnected"),
            "{e}"
        );
        assert_eq!(left(), 0);

        let (url, _) = serve(body.clone(), body.len());
        let mut a = archive(&url, &body);
        a.url = format!("{url}/elsewhere.tar.gz");
        let e = fetch(&a, &cache, &into, &quiet).unwrap_err();
        assert!(
            e.contains("404")
                && e.contains("download it yourself and unpack it: mkdir -p ")
                && e.contains(&format!("&& tar xzf {} -C ", a.file_name())),
            "{e}"
        );
        assert_eq!(left(), 0);

        let (url, _) = serve(body.clone(), 1 << 30);
        let e = fetch(&archive(&url, &body), &cache, &into, &quiet).unwrap_err();
        assert!(
            e.contains("1073741824 bytes"),
            "a huge answer is refused before it is read: {e}"
        );

        let (url, _) = serve(body.clone(), body.len());
        let mut a = archive(&url, &body);
        a.files.push("c.bin".into());
        let e = fetch(&a, &cache, &into, &quiet).unwrap_err();
        assert!(e.contains("lacks c.bin"), "{e}");
    }
}
