//! The command line: `postern serve` (the default) and `postern admin …`.
//! The flags documented in DESIGN §10 are a stable contract for scripts.

use std::io::Read;
use std::path::{Path, PathBuf};

use analytics::accounts::{self, Role};
use analytics::model::Scope;
use analytics::sites;
use analytics::store::Durability;
use analytics::Store;
use anyhow::{bail, Context};
use chrono::Utc;
use clap::{Parser, Subcommand};

use crate::auth::hash_password;
use crate::config::ServeArgs;

#[derive(Debug, Parser)]
#[command(name = "postern", version, about = "Ad-blocker wall analytics collector", args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// With no command, `postern` serves with these flags.
    #[command(flatten)]
    pub serve: ServeArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the collector (the default when no command is given)
    Serve(Box<ServeArgs>),
    /// Manage accounts, users, keys and sites directly in the database, and back it up
    #[command(subcommand)]
    Admin(AdminCommand),
}

// The names are the command-line contract (`create-key`, `create-user`, …).
#[allow(clippy::enum_variant_names)]
#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Create an API key (and the account if needed); prints only the key
    CreateKey {
        #[arg(long, env = "POSTERN_DB")]
        db: PathBuf,
        #[arg(long)]
        account: String,
        /// Comma-separated scopes among read, write, ingest [default: all]
        #[arg(long, value_delimiter = ',')]
        scopes: Option<Vec<String>>,
        /// A label shown in key listings
        #[arg(long, default_value = "admin CLI")]
        name: String,
    },
    /// Create a dashboard user; the password is read from standard input
    CreateUser {
        #[arg(long, env = "POSTERN_DB")]
        db: PathBuf,
        #[arg(long)]
        account: String,
        #[arg(long)]
        email: String,
        /// admin or reader
        #[arg(long)]
        role: String,
    },
    /// Create a site; prints only its id
    CreateSite {
        #[arg(long, env = "POSTERN_DB")]
        db: PathBuf,
        #[arg(long)]
        account: String,
        #[arg(long)]
        name: String,
        #[arg(long)]
        domain: String,
        /// IANA timezone name
        #[arg(long, default_value = "UTC")]
        timezone: String,
    },
    /// Copy the database to a file, safely while `postern serve` runs on it
    Backup {
        #[arg(long, env = "POSTERN_DB")]
        db: PathBuf,
        /// The backup file to write (refused if it exists, unless --force)
        #[arg(long)]
        to: PathBuf,
        /// Replace the file named by --to if it exists
        #[arg(long)]
        force: bool,
    },
}

const MIN_PASSWORD_LEN: usize = 8;

pub fn run_admin(cmd: AdminCommand) -> anyhow::Result<()> {
    let now = Utc::now();
    match cmd {
        AdminCommand::CreateKey { db, account, scopes, name } => {
            let scopes = match scopes {
                None => Scope::ALL.to_vec(),
                Some(list) => list
                    .iter()
                    .map(|s| Scope::parse(s.trim()).with_context(|| format!("unknown scope {s:?}: use read, write, ingest")))
                    .collect::<anyhow::Result<_>>()?,
            };
            let mut w = open(&db)?.open_writer(Durability::Full)?;
            let new = w.run(|c| {
                let account_id = accounts::ensure_account(c, &account, now)?;
                accounts::create_key(c, account_id, &name, &scopes, now)
            })?;
            println!("{}", new.secret);
        }
        AdminCommand::CreateUser { db, account, email, role } => {
            let role = Role::parse(&role).context("role must be admin or reader")?;
            if !email.contains('@') {
                bail!("{email:?} is not an e-mail address");
            }
            let mut password = String::new();
            std::io::stdin().read_to_string(&mut password).context("reading the password from standard input")?;
            let password = password.lines().next().unwrap_or_default();
            if password.chars().count() < MIN_PASSWORD_LEN {
                bail!("the password (read from standard input) must have at least {MIN_PASSWORD_LEN} characters");
            }
            let hash = hash_password(password)?;
            let mut w = open(&db)?.open_writer(Durability::Full)?;
            w.run(|c| {
                let account_id = accounts::ensure_account(c, &account, now)?;
                accounts::create_user(c, account_id, &email, &hash, role, now)
            })?;
            eprintln!("created {} user {email} in account {account}", role.as_str());
        }
        AdminCommand::CreateSite { db, account, name, domain, timezone } => {
            let tz: chrono_tz::Tz = timezone.parse().map_err(|_| anyhow::anyhow!("unknown timezone {timezone:?}"))?;
            let domain = crate::api::normalize_domain(&domain).with_context(|| format!("{domain:?} is not a host name"))?;
            let mut w = open(&db)?.open_writer(Durability::Full)?;
            let site = w.run(|c| {
                let account_id = accounts::ensure_account(c, &account, now)?;
                let new = sites::NewSite { account_id, name: &name, domain: &domain, timezone: tz, revenue_per_mille: None };
                sites::create(c, &new, now)
            })?;
            println!("{}", site.id);
        }
        AdminCommand::Backup { db, to, force } => backup(&db, &to, force)?,
    }
    Ok(())
}

/// `admin backup`: SQLite's online backup of a database a collector may be
/// serving; the copy's size and time go to stderr.
fn backup(db: &Path, to: &Path, force: bool) -> anyhow::Result<()> {
    if analytics::store::is_postgres_url(&db.to_string_lossy()) {
        bail!("admin backup copies a SQLite file; back up a PostgreSQL database with pg_dump (see the README)");
    }
    if !db.is_file() {
        bail!("no database at {}", db.display());
    }
    if to.exists() {
        if !force {
            bail!("{} exists: choose another name, or pass --force to replace it", to.display());
        }
        // Replacing the live database by its own copy would lose every write made meanwhile.
        use std::os::unix::fs::MetadataExt;
        let (live, target) = (std::fs::metadata(db)?, std::fs::metadata(to)?);
        if (live.dev(), live.ino()) == (target.dev(), target.ino()) {
            bail!("--to names the database itself");
        }
    }
    let started = std::time::Instant::now();
    let copied = analytics::store::backup(db, to, force).with_context(|| format!("backing up {} to {}", db.display(), to.display()))?;
    eprintln!(
        "backed up {} to {}: {} pages, {:.1} MiB, in {:.1} s; the copy passed PRAGMA quick_check",
        db.display(),
        to.display(),
        copied.pages,
        copied.bytes as f64 / (1024.0 * 1024.0),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn open(db: &PathBuf) -> anyhow::Result<Store> {
    Store::open(db).with_context(|| format!("opening database {}", analytics::store::describe(db)))
}
