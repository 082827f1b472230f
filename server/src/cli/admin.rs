//! The admin commands (`campaign`, `token`, `worker`): an HTTP client of the coordinator's
//! admin routes and what each command prints.

use super::*;

/// A client for the admin API.
pub struct AdminClient {
    base: String,
    token: String,
    http: reqwest::Client,
}

impl AdminClient {
    pub fn new(api: &ApiArgs) -> anyhow::Result<AdminClient> {
        let token = api.token()?;
        let http = api.http()?.timeout(Duration::from_secs(120));
        Ok(AdminClient {
            base: api.server.trim_end_matches('/').to_string(),
            token,
            http: http.build()?,
        })
    }

    async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> anyhow::Result<T> {
        let url = format!("{}/api/v1{path}", self.base);
        let mut req = self.http.request(method, &url).bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("cannot reach {url}"))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp.json().await?);
        }
        match resp.json::<ApiError>().await {
            Ok(e) => bail!("{status}: {}: {}", e.code, e.message),
            Err(_) => bail!("{status} from {url}"),
        }
    }

    pub async fn create_campaign(&self, req: &CreateCampaign) -> anyhow::Result<Campaign> {
        self.call(Method::POST, "/campaigns", Some(req)).await
    }

    pub async fn plan(&self, req: &PlanCampaign) -> anyhow::Result<CampaignPlan> {
        self.call(Method::POST, "/campaigns/plan", Some(req)).await
    }

    pub async fn list_campaigns(&self) -> anyhow::Result<Vec<Campaign>> {
        self.call::<(), _>(Method::GET, "/campaigns", None).await
    }

    pub async fn queue(&self) -> anyhow::Result<Vec<tmd_wire::QueuedCampaign>> {
        self.call::<(), _>(Method::GET, "/campaigns/queue", None)
            .await
    }

    pub async fn campaign(&self, id: i64) -> anyhow::Result<Campaign> {
        self.call::<(), _>(Method::GET, &format!("/campaigns/{id}"), None)
            .await
    }

    pub async fn progress(&self, id: i64) -> anyhow::Result<CampaignProgress> {
        self.call::<(), _>(Method::GET, &format!("/campaigns/{id}/progress"), None)
            .await
    }

    pub async fn estimate(
        &self,
        id: i64,
        estimate: &tmd_wire::CostEstimate,
    ) -> anyhow::Result<tmd_wire::EstimateApplied> {
        self.call(
            Method::POST,
            &format!("/campaigns/{id}/estimate"),
            Some(estimate),
        )
        .await
    }

    pub async fn transition(&self, id: i64, action: &str) -> anyhow::Result<Campaign> {
        self.call::<(), _>(Method::POST, &format!("/campaigns/{id}/{action}"), None)
            .await
    }

    pub async fn create_token(
        &self,
        req: &CreateEnrollmentToken,
    ) -> anyhow::Result<EnrollmentToken> {
        self.call(Method::POST, "/enrollment-tokens", Some(req))
            .await
    }

    pub async fn workers(&self) -> anyhow::Result<Vec<WorkerInfo>> {
        self.call::<(), _>(Method::GET, "/workers", None).await
    }

    pub async fn worker(&self, id: i64) -> anyhow::Result<WorkerInfo> {
        self.call::<(), _>(Method::GET, &format!("/workers/{id}"), None)
            .await
    }

    pub async fn quarantine(&self, id: i64, reason: &str) -> anyhow::Result<WorkerInfo> {
        let body = QuarantineWorker {
            reason: reason.to_string(),
        };
        self.call(
            Method::POST,
            &format!("/workers/{id}/quarantine"),
            Some(&body),
        )
        .await
    }

    pub async fn requeue(&self, id: i64, units: &[i64]) -> anyhow::Result<Requeued> {
        let body = RequeueUnits {
            unit_ids: (!units.is_empty()).then(|| units.to_vec()),
        };
        self.call(
            Method::POST,
            &format!("/campaigns/{id}/requeue"),
            Some(&body),
        )
        .await
    }

    pub async fn tokens(&self) -> anyhow::Result<Vec<EnrollmentTokenInfo>> {
        self.call::<(), _>(Method::GET, "/enrollment-tokens", None)
            .await
    }

    pub async fn revoke_token(&self, id: i64) -> anyhow::Result<EnrollmentTokenInfo> {
        self.call::<(), _>(
            Method::POST,
            &format!("/enrollment-tokens/{id}/revoke"),
            None,
        )
        .await
    }

    pub async fn revoke_worker(&self, id: i64) -> anyhow::Result<WorkerInfo> {
        self.call::<(), _>(Method::POST, &format!("/workers/{id}/revoke"), None)
            .await
    }

    pub async fn reinstate(&self, id: i64) -> anyhow::Result<WorkerInfo> {
        self.call::<(), _>(Method::POST, &format!("/workers/{id}/reinstate"), None)
            .await
    }
}

fn print_json<T: Serialize>(v: &T) -> anyhow::Result<()> {
    outln!("{}", serde_json::to_string_pretty(v)?)?;
    Ok(())
}

/// The request that creates the campaign of `function` with `a`'s settings.
fn create_request(
    a: &CreateArgs,
    function: &str,
    priority: Option<i32>,
) -> anyhow::Result<CreateCampaign> {
    Ok(CreateCampaign {
        name: a.name.clone(),
        function: function.to_string(),
        // --format has a default; --precision, when given, replaces it.
        format: a.precision.is_none().then(|| a.format.clone()),
        precision: a.precision,
        min_bits: a.min_bits,
        ranges: a.ranges()?,
        whole: a.whole.then_some(true),
        unit_bits: a.unit_bits,
        replication: a.replication,
        trust_all_workers: a.trust_all_workers.then_some(true),
        distinct_owners: a.distinct_owners.then_some(true),
        adaptive: a.adaptive.then_some(true),
        audit_rate: a.audit_rate,
        trust_after: a.trust_after,
        priority,
        reduction: a.no_reduction.then_some(false),
    })
}

/// Plans the campaign of `function` and creates it, with the unit size the plan chose; with
/// `--dry-run` prints the plan instead and creates nothing (`None`).
async fn plan_and_create(
    client: &AdminClient,
    a: &CreateArgs,
    function: &str,
    priority: Option<i32>,
    estimate: Option<tmd_wire::CostEstimate>,
) -> anyhow::Result<Option<Campaign>> {
    let req = create_request(a, function, priority)?;
    let plan = client
        .plan(&PlanCampaign {
            campaign: req.clone(),
            estimate,
        })
        .await?;
    if a.dry_run {
        outln!("{}", plan_text(&plan))?;
        return Ok(None);
    }
    if plan.unit_bits_chosen {
        eprintln!("tmd: {}", plan.unit_bits_reason);
    }
    // The size planned, so that the server need not choose it again.
    let req = CreateCampaign {
        unit_bits: Some(plan.unit_bits),
        ..req
    };
    Ok(Some(
        creating(plan.units, client.create_campaign(&req)).await?,
    ))
}

/// Creates one campaign (and posts its estimate when given); prints it.
async fn create_one(client: &AdminClient, a: &CreateArgs, function: &str) -> anyhow::Result<()> {
    // Read before the campaign is created, so a missing file creates nothing.
    let estimate = a.estimate.as_deref().map(read_estimate).transpose()?;
    let Some(campaign) = plan_and_create(client, a, function, a.priority, estimate.clone()).await?
    else {
        return Ok(());
    };
    let Some(estimate) = estimate else {
        return print_json(&campaign);
    };
    let applied = client
        .estimate(campaign.id, &estimate)
        .await
        .with_context(|| {
            format!(
                "campaign {} was created, but its estimate was refused (post it again \
                 with `campaign estimate {} FILE`)",
                campaign.id, campaign.id
            )
        })?;
    print_json(&serde_json::json!({ "campaign": campaign, "estimate": applied }))
}

/// Runs `campaign ...`.
pub async fn run_campaign(api: &ApiArgs, cmd: &CampaignCommand) -> anyhow::Result<()> {
    // What the command line lacks is said before the token or the server is asked for.
    if let CampaignCommand::Create(a) = cmd {
        a.ranges()?;
    }
    let client = AdminClient::new(api)?;
    match cmd {
        CampaignCommand::Create(a) => {
            let functions: Vec<&str> = a.function.split(',').map(str::trim).collect();
            if functions.iter().any(|f| f.is_empty()) {
                bail!("--function: a name, or names separated by commas (exp,log,sinh)");
            }
            if functions.len() == 1 {
                return create_one(&client, a, functions[0]).await;
            }
            if a.estimate.is_some() {
                bail!(
                    "--estimate is one function's: create the campaigns, then post each \
                     estimate with `campaign estimate ID FILE`"
                );
            }
            if a.name.is_some() {
                bail!("--name names one campaign: leave it out with several functions");
            }
            // The first listed runs first: priorities descend from --priority.
            let top = a.priority.unwrap_or(0);
            let mut created = Vec::with_capacity(functions.len());
            for (i, f) in functions.iter().enumerate() {
                let priority = Some(top.saturating_sub(i as i32));
                let made = plan_and_create(&client, a, f, priority, None)
                    .await
                    .with_context(|| {
                        format!(
                            "the campaign of {f} ({} of the {} listed were created)",
                            created.len(),
                            functions.len()
                        )
                    })?;
                if let Some(c) = made {
                    eprintln!("queued campaign {} ({f}, priority {})", c.id, c.priority);
                    created.push(c);
                }
            }
            if a.dry_run {
                return Ok(());
            }
            print_json(&created)
        }
        CampaignCommand::Estimate { id, file } => {
            let estimate = read_estimate(file)?;
            print_json(&client.estimate(*id, &estimate).await?)
        }
        CampaignCommand::List(ListArgs {
            output: ListOutput::Json,
        }) => print_json(&client.list_campaigns().await?),
        CampaignCommand::List(_) => {
            // Why units of the active and paused campaigns wait, from the queue's one request.
            let waiting: std::collections::HashMap<i64, String> = client
                .queue()
                .await?
                .into_iter()
                .map(|q| (q.id, waiting_text(&q.waiting)))
                .collect();
            outln!(
                "{:>6}  {:<10} {:<10} {:>4} {:>5} {:>10} {:>8}  {:<20}  {:<28}  name",
                "id",
                "state",
                "function",
                "prec",
                "min",
                "units",
                "priority",
                "completed",
                "waiting"
            )?;
            for c in client.list_campaigns().await? {
                outln!(
                    "{:>6}  {:<10} {:<10} {:>4} {:>5} {:>10} {:>8}  {:<20}  {:<28}  {}",
                    c.id,
                    c.state.as_str(),
                    c.function,
                    c.precision,
                    c.min_bits,
                    c.units_total,
                    c.priority,
                    c.completed_at
                        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
                        .unwrap_or_else(|| "-".into()),
                    waiting.get(&c.id).map_or("-", String::as_str),
                    printable(&c.name)
                )?;
            }
            Ok(())
        }
        CampaignCommand::Show { id } => {
            let campaign = client.campaign(*id).await?;
            let progress = client.progress(*id).await?;
            print_json(&serde_json::json!({ "campaign": campaign, "progress": progress }))
        }
        CampaignCommand::Pause { id } => print_json(&client.transition(*id, "pause").await?),
        CampaignCommand::Resume { id } => print_json(&client.transition(*id, "resume").await?),
        CampaignCommand::Cancel { id } => print_json(&client.transition(*id, "cancel").await?),
        CampaignCommand::Requeue { id, units } => print_json(&client.requeue(*id, units).await?),
        CampaignCommand::Ringers { id, file } => {
            let text = if file.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin())?
            } else {
                std::fs::read_to_string(file)
                    .with_context(|| format!("cannot read {}", file.display()))?
            };
            let body = LoadKnownCases {
                lines: text.lines().map(String::from).collect(),
            };
            let loaded: KnownCasesLoaded = client
                .call(
                    Method::POST,
                    &format!("/campaigns/{id}/known-cases"),
                    Some(&body),
                )
                .await?;
            print_json(&loaded)
        }
        // The commands that follow a campaign live in follow.rs.
        CampaignCommand::Export(a) => crate::cli::follow::run_export(api, a).await,
        CampaignCommand::Watch(a) => crate::cli::follow::run_watch(api, a).await,
    }
}

/// Waits for a campaign's creation, showing how long it has taken on a terminal (a whole
/// binary80 function inserts a million units: tens of seconds).
async fn creating<T>(
    units: u64,
    create: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        if units >= 100_000 {
            eprintln!("tmd: creating the campaign's {units} units");
        }
        return create.await;
    }
    let spinner = indicatif::ProgressBar::new_spinner();
    spinner.set_style(
        indicatif::ProgressStyle::with_template("{spinner} creating {msg} [{elapsed}]")
            .expect("a valid template"),
    );
    spinner.set_message(format!("the campaign's {units} units"));
    spinner.enable_steady_tick(Duration::from_millis(200));
    let out = create.await;
    spinner.finish_and_clear();
    out
}

/// A campaign's plan for people (`campaign create --dry-run`).
pub fn plan_text(p: &CampaignPlan) -> String {
    let mut lines = vec![
        format!(
            "{} in {} at least {} bits: nothing created (dry run)",
            p.function, p.format, p.min_bits
        ),
        format!("units        {} of 2^{} arguments", p.units, p.unit_bits),
        format!("unit size    {}", p.unit_bits_reason),
        format!("arguments    {} in {} binades", p.arguments, p.binades),
        format!(
            "HR-cases     about {:.0} expected ({:.1} per unit)",
            p.expected_hr_cases, p.expected_cases_per_unit
        ),
        format!(
            "skipped      {} arguments in {} blocks skipped whole{}",
            p.skipped_arguments,
            p.skipped_blocks.len(),
            if p.skipped_blocks.len() >= crate::domain::sizing::MAX_SKIPPED_BLOCKS {
                " (the first listed)"
            } else {
                ""
            }
        ),
    ];
    for b in &p.skipped_blocks {
        lines.push(format!(
            "  [{}, {}] ({} arguments)",
            b.first, b.last, b.arguments
        ));
    }
    if !p.derived.is_empty() {
        let n: u128 = p
            .derived
            .iter()
            .filter_map(|d| d.arguments.parse::<u128>().ok())
            .sum();
        lines.push(format!(
            "derived      {n} arguments in {} runs, from the base binades (not searched; \
             --no-reduction searches them)",
            p.derived.len()
        ));
        for d in &p.derived {
            lines.push(format!(
                "  [{}, {}] ({} arguments) from {}: {}",
                d.first, d.last, d.arguments, d.base, d.rule
            ));
        }
    }
    lines.push(match (p.estimated_seconds, &p.estimate_backend) {
        (Some(s), Some(b)) => format!(
            "time         {} on the estimate's back end ({b})",
            crate::cli::follow::duration(s)
        ),
        _ => "time         unknown: give --estimate FILE (`tmd-worker estimate --output json`)"
            .into(),
    });
    lines.join("\n")
}

/// A cost estimate from a JSON file (`-`: standard input).
fn read_estimate(file: &std::path::Path) -> anyhow::Result<tmd_wire::CostEstimate> {
    let text = if file.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())?
    } else {
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?
    };
    serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a cost estimate (CostEstimate JSON)",
            file.display()
        )
    })
}

/// Runs `token ...`.
pub async fn run_token(api: &ApiArgs, cmd: &TokenCommand) -> anyhow::Result<()> {
    let client = AdminClient::new(api)?;
    match cmd {
        TokenCommand::Create {
            uses,
            expires_in_hours,
            note,
            owner,
            trusted,
        } => {
            let req = CreateEnrollmentToken {
                uses: *uses,
                expires_in_seconds: expires_in_hours.map(|h| h * 3600),
                note: note.clone(),
                owner: owner.clone(),
                trusted: trusted.then_some(true),
            };
            print_json(&client.create_token(&req).await?)
        }
        TokenCommand::List(ListArgs {
            output: ListOutput::Json,
        }) => print_json(&client.tokens().await?),
        TokenCommand::List(_) => {
            outln!(
                "{:>6}  {:<8} {:<8} {:>9} {:>8} {:>11}  {:<20}  {:<16} note",
                "id",
                "state",
                "trust",
                "uses left",
                "workers",
                "quarantined",
                "expires",
                "owner"
            )?;
            let now = chrono::Utc::now();
            for t in client.tokens().await? {
                let state = if t.revoked_at.is_some() {
                    "revoked"
                } else if t.expires_at.is_some_and(|e| e <= now) {
                    "expired"
                } else if t.uses_left == Some(0) {
                    "used up"
                } else {
                    "active"
                };
                outln!(
                    "{:>6}  {:<8} {:<8} {:>9} {:>8} {:>11}  {:<20}  {:<16} {}",
                    t.id,
                    state,
                    if t.trusted { "trusted" } else { "-" },
                    t.uses_left.map_or("unlimited".into(), |n| n.to_string()),
                    t.workers,
                    t.quarantined_workers,
                    t.expires_at
                        .map(|e| e.format("%Y-%m-%dT%H:%M:%SZ").to_string())
                        .unwrap_or_else(|| "never".into()),
                    printable(t.owner.as_deref().unwrap_or("-")),
                    printable(t.note.as_deref().unwrap_or(""))
                )?;
            }
            Ok(())
        }
        TokenCommand::Revoke { id } => print_json(&client.revoke_token(*id).await?),
    }
}

/// A text from the server fit for a terminal: control characters (escape sequences that
/// could rewrite the screen, newlines that forge rows) shown escaped. Names are checked when
/// they arrive, but a database may hold older ones.
pub fn printable(s: &str) -> String {
    if s.chars().any(char::is_control) {
        s.escape_default().to_string()
    } else {
        s.to_string()
    }
}

/// Runs `worker ...`.
pub async fn run_worker(api: &ApiArgs, cmd: &WorkerCommand) -> anyhow::Result<()> {
    let client = AdminClient::new(api)?;
    match cmd {
        WorkerCommand::List(ListArgs {
            output: ListOutput::Json,
        }) => print_json(&client.workers().await?),
        WorkerCommand::List(_) => {
            outln!(
                "{:>6}  {:<12} {:>8} {:>7} {:>7} {:>6} {:>9} {:>7}  {:<16} name",
                "id",
                "state",
                "units",
                "valid",
                "invalid",
                "forged",
                "expired",
                "streak",
                "owner"
            )?;
            for w in client.workers().await? {
                let r = &w.reputation;
                outln!(
                    "{:>6}  {:<12} {:>8} {:>7} {:>7} {:>6} {:>9} {:>7}  {:<16} {}",
                    w.id,
                    if w.quarantined_at.is_some() {
                        "quarantined"
                    } else {
                        "ok"
                    },
                    w.units_done,
                    r.valid,
                    r.invalid,
                    r.forged,
                    format!("{}/{}", r.leases_expired, r.leases_total),
                    r.streak,
                    printable(&w.owner),
                    printable(&w.name)
                )?;
            }
            Ok(())
        }
        WorkerCommand::Show { id } => print_json(&client.worker(*id).await?),
        WorkerCommand::Quarantine { id, reason } => {
            print_json(&client.quarantine(*id, reason).await?)
        }
        WorkerCommand::Reinstate { id } => print_json(&client.reinstate(*id).await?),
        WorkerCommand::Revoke { id } => print_json(&client.revoke_worker(*id).await?),
    }
}

/// Why a campaign's units wait, on one line (`replica 12, held 1`), or `-` when none do.
fn waiting_text(waiting: &[tmd_wire::Waiting]) -> String {
    if waiting.is_empty() {
        return "-".into();
    }
    waiting
        .iter()
        .map(|w| format!("{} {}", w.reason, w.units))
        .collect::<Vec<_>>()
        .join(", ")
}
