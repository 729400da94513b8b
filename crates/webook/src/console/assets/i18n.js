// i18n.js — UI text in English and Chinese: t(key, params) and t.parts (for sentences with
// links inside), the chosen language (localStorage, else navigator.language), the matching
// Accept-Language for API calls (so the server's `msg` comes back in it), and locale-aware
// formats for times, relative times, durations and money (fen → ¥x.xx).

const KEY = "webook.lang";

const en = {
  "nav.home": "Home", "nav.search": "Search", "nav.write": "Write", "nav.ops": "Ops", "nav.me": "Me",
  "nav.logout": "Log out", "nav.login": "Log in", "nav.signup": "Sign up", "nav.language": "Language",
  "nav.main": "Main", "nav.section": "Section",
  "more": "Load more", "none": "Nothing yet.", "save": "Save", "cancel": "Cancel", "edit": "Edit", "view": "View",
  "status": "Status", "time": "Time", "updated": "Updated", "untitled": "(untitled)",
  "status.new": "new", "status.draft": "unpublished", "status.published": "published", "status.withdrawn": "withdrawn",
  "status.unknown": "unknown",
  "count.likes": "1 like|{n} likes", "count.comments": "1 comment|{n} comments",
  "err.network": "Network error: the server could not be reached.", "err.http": "The server answered HTTP {status}.",
  "err.unknown": "Something went wrong.", "err.title": "Something went wrong",
  "notfound.title": "Page not found", "notfound.body": "There is nothing at this address.",

  "home.title": "webook", "home.hot": "Hot right now", "home.computedAt": "Computed at",
  "home.hotEmpty": "The hot list is empty.", "home.hotNotYet": "The hot list has not been computed yet; try again in a moment.",
  "home.latest": "Latest articles", "home.latestEmpty": "No published articles yet.",
  "home.feed": "Your feed", "home.feedEmpty": "Nothing in your feed yet: follow some authors.",
  "home.welcome": "Welcome to webook",
  "home.anonymous": "Read what is hot and search everything. Log in to read articles, follow authors, comment and write.",
  "feed.article": "{actor} published {article}", "feed.like": "{actor} liked {article}",
  "feed.yourArticle": "your article", "feed.follow": "{actor} followed you",
  "feed.commentOn": "{actor} commented on {article}", "feed.comment": "{actor} commented",

  "search.title": "Search", "search.titleFor": "Search: {q}", "search.label": "Search articles and people",
  "search.placeholder": "Search…", "search.go": "Search", "search.articles": "Articles",
  "search.users": "People", "search.noArticles": "No articles found.", "search.noUsers": "No people found.",
  "search.rebuilding": "The search index is being rebuilt. Please try again in a minute.",
  "search.suggestions": "Suggestions", "search.kindArticle": "Article", "search.kindUser": "Person",
  "tag.title": "Tag {id}", "tag.empty": "No published articles carry this tag.",
  "topic.feed": "Atom feed", "topic.follow": "Follow topic", "topic.unfollow": "Unfollow topic",
  "topic.sort.new": "Newest", "topic.sort.hot": "Most liked",

  "auth.signupTitle": "Create an account", "auth.loginTitle": "Log in", "auth.email": "Email",
  "auth.password": "Password", "auth.confirmPassword": "Confirm password",
  "auth.passwordHint": "At least 8 characters with a letter, a digit and a symbol.",
  "auth.signup": "Sign up", "auth.login": "Log in", "auth.haveAccount": "Already have an account?",
  "auth.noAccount": "No account yet?", "auth.withEmail": "With email and password", "auth.withSms": "With a code by SMS",
  "auth.phone": "Mobile number", "auth.phoneHint": "Mainland China mobile number, e.g. 13800138000.",
  "auth.sendCode": "Send code", "auth.resendIn": "Resend in {n} s", "auth.code": "Code (6 digits)",
  "auth.loginWithCode": "Log in with code", "auth.codeSent": "Code sent.",

  "article.edit": "Edit", "article.reads": "reads", "article.likes": "likes", "article.collects": "collects",
  "article.comments": "comments", "article.like": "Like", "article.liked": "Liked",
  "article.collect": "Collect", "article.collected": "Collected",
  "reward.title": "Reward the author", "reward.amount": "Amount (¥)", "reward.amountHint": "From ¥0.01 to ¥5000.",
  "reward.send": "Reward", "reward.badAmount": "amount: enter a sum between 0.01 and 5000 yuan, at most two decimals",
  "reward.qrAlt": "Payment QR code", "reward.scan": "Scan to pay {amount}, or open the payment page:",
  "reward.payLink": "Open the payment page", "reward.waiting": "Waiting for the payment…",
  "reward.paid": "Paid, thank you!", "reward.failed": "The payment failed or expired.",
  "reward.s.init": "pending", "reward.s.paid": "paid", "reward.s.failed": "failed",
  "comment.title": "Comments", "comment.write": "Write a comment", "comment.post": "Post",
  "comment.reply": "Reply", "comment.replyTo": "replying to {name}", "comment.delete": "Delete",
  "comment.deleted": "This comment was deleted.", "comment.deletedAuthor": "(deleted)",
  "comment.none": "No comments yet.", "comment.more": "More comments", "comment.moreReplies": "All {n} replies",

  "user.follow": "Follow", "user.unfollow": "Unfollow", "user.followers": "followers", "user.followees": "following",
  "user.tab.followers": "Followers", "user.tab.followees": "Following",
  "user.articles": "Articles", "user.lists": "Articles and follows", "user.noArticles": "No published articles.",
  "user.no.followers": "No followers yet.", "user.no.followees": "Follows nobody yet.",
  "user.following": "followed by you", "user.editProfile": "Edit your profile",

  "me.title": "Your profile", "me.profile": "Profile", "me.articles": "My articles", "me.account": "Account",
  "me.edit": "Edit profile", "me.nickname": "Nickname", "me.birthday": "Birthday", "me.birthdayHint": "Leave empty to clear it.",
  "me.aboutMe": "About me", "me.saved": "Saved.", "me.id": "User id", "me.publicPage": "Your public page",
  "me.noArticles": "You have not written anything yet.",
  "account.balance": "Balance", "account.entries": "Entries", "account.amount": "Amount", "account.memo": "What",
  "account.sent": "Rewards sent", "account.received": "Rewards received", "account.article": "Article",

  "editor.newTitle": "New article", "editor.editTitle": "Edit article", "editor.title": "Title",
  "editor.content": "Content", "editor.contentHint": "Plain text; a blank line starts a new paragraph.",
  "editor.tags": "Tags", "editor.tagsHint": "Comma separated, e.g. rust, databases.",
  "editor.save": "Save draft", "editor.publish": "Publish", "editor.withdraw": "Withdraw",
  "editor.confirmWithdraw": "Withdraw this article? Readers will no longer see it.",
  "editor.withdrawn": "Withdrawn: readers no longer see it.", "editor.saved": "Draft saved at {time}.",
  "editor.tagsFailed": "The article was saved, but its tags were not: {msg}",
  "editor.richWarning": "This article has formatting (links, images, lists…) that this plain-text editor does not keep: saving turns it into plain paragraphs.",

  "ops.jobs": "Jobs", "ops.findings": "Findings", "ops.instances": "Instances", "ops.events": "Events",
  "jobs.name": "Name", "jobs.cron": "Schedule (cron)", "jobs.timezone": "Time zone", "jobs.next": "Next fire",
  "jobs.owner": "Owner", "jobs.lease": "Lease", "jobs.executor": "Executor", "jobs.cfg": "Configuration (JSON)",
  "jobs.misfire": "Misfire policy", "jobs.timeoutMs": "Timeout (ms)",
  "jobs.stop": "Stop", "jobs.resume": "Resume", "jobs.trigger": "Trigger", "jobs.runs": "Runs",
  "jobs.confirmStop": "Stop job \"{name}\"? It will not fire until resumed.",
  "jobs.never": "never", "jobs.leaseUntil": "until {time} ({rel})", "jobs.heartbeat": "heartbeat {rel}",
  "jobs.none": "No jobs.", "jobs.live": "Refreshed every 2 s while this page is visible.",
  "jobs.editTitle": "Edit {name}", "jobs.addTitle": "Add a job", "jobs.add": "Add job", "jobs.added": "Job \"{name}\" created.",
  "jobs.nameHint": "1–64 of A–Z a–z 0–9 . _ -", "jobs.cronHint": "Six fields with seconds, e.g. 0 */5 * * * *, or @every 30s.",
  "jobs.cfgHint": "For http: {\"url\": \"http://…\", \"method\": \"POST\", \"timeout_ms\": 5000}.",
  "jobs.badCfg": "cfg: must be a JSON object",
  "jobs.s.waiting": "waiting for its next fire", "jobs.s.running": "running now", "jobs.s.paused": "stopped",
  "jobs.misfire.fire_once": "fire once", "jobs.misfire.skip": "skip", "jobs.misfire.catch_up": "catch up",
  "runs.title": "Last runs of {name}", "runs.id": "Id", "runs.scheduled": "Scheduled", "runs.started": "Started",
  "runs.duration": "Duration", "runs.error": "Error", "runs.none": "No runs yet.", "runs.runningFor": "running {d}",
  "findings.show": "Show", "findings.s.open": "open", "findings.s.fixed": "fixed", "findings.s.resolved": "resolved",
  "findings.s.all": "all", "findings.billDate": "Bill date", "findings.kind": "Kind", "findings.tradeNo": "Trade no.",
  "findings.providerAmt": "Provider", "findings.ourAmt": "Ours", "findings.detail": "Detail", "findings.note": "Note",
  "findings.notePlaceholder": "What was done and why", "findings.noteFor": "Note on finding {id}",
  "findings.actOn": "Act on finding {id}",
  "findings.credit": "Credit", "findings.refund": "Refund", "findings.resolve": "Resolve",
  "findings.creditFor": "Credit finding {id}", "findings.refundFor": "Refund finding {id}",
  "findings.resolveFor": "Resolve finding {id}", "findings.allowNegative": "allow negative balance",
  "findings.confirmRefund": "Refund trade {tradeNo} to its payer? The money goes back through the provider and any credit is reversed; this cannot be undone.",
  "findings.acted": "Action", "findings.by": "by admin {uid}", "findings.auto": "fixed automatically",
  "findings.done": "Done: {action}.", "findings.none": "No findings.",
  "ops.refunds": "Refunds",
  "refunds.s.all": "all", "refunds.s.requested": "requested", "refunds.s.processing": "processing", "refunds.s.abnormal": "abnormal",
  "refunds.s.succeeded": "succeeded", "refunds.s.failed": "failed", "refunds.none": "No refunds.",
  "refunds.formTitle": "Refund a payment", "refunds.tradeNo": "Trade no.",
  "refunds.tradeNoHint": "The payment's trade number, e.g. from a finding.", "refunds.reason": "Reason",
  "refunds.reasonHint": "1–80 characters; the payer sees it.",
  "refunds.allowNegative": "Allow the author's balance to go below 0",
  "refunds.allowNegativeHint": "Otherwise a refund taking back more than the author's balance is refused.",
  "refunds.submit": "Refund", "refunds.confirm": "Refund trade {tradeNo} in full to its payer? The author's credit is reversed; this cannot be undone.",
  "refunds.result": "Refund {refundNo} of {amt} for trade {tradeNo}: {status}.",
  "refunds.refundNo": "Refund no.", "refunds.biz": "For", "refunds.amt": "Amount", "refunds.requestedBy": "Asked by",
  "refunds.admin": "admin {uid}", "refunds.negativeAllowed": "may go below 0", "refunds.refundedAt": "Refunded",
  "instances.thisOne": "This instance", "instances.readyz": "Readiness:", "instances.ready": "ready",
  "instances.notReady": "not ready (HTTP {status})", "instances.mode": "Mode", "instances.database": "Database",
  "instances.redis": "Redis", "instances.details": "Details", "instances.updated": "Updated {time}; refreshed every 5 s.",
  "instances.id": "Instance", "instances.role": "Role", "instances.version": "Version", "instances.started": "Started",
  "instances.seen": "Last seen", "instances.this": "this one",

  "events.groupsTitle": "Consumer groups", "events.group": "Group", "events.topic": "Topic", "events.groupTopic": "Group / topic", "events.lag": "Lag",
  "events.health": "Health", "events.waiting": "Waiting", "events.parked": "Parked", "events.replayedCol": "Replayed",
  "events.discardedCol": "Discarded", "events.handled": "Handled / failed",
  "events.h.ok": "ok", "events.h.failing": "failing", "events.h.stuck": "stuck", "events.h.elsewhere": "not consumed here",
  "events.failingFor": "for {d}", "events.oldest": "oldest {d}", "events.replayingN": "+{n} replaying",
  "events.replayGroup": "Replay all of this group", "events.replayGroupLabel": "Replay every parked event of {group} on {topic}",
  "events.confirmReplayGroup": "Replay the parked events of {group} on {topic} ({n})? Each is applied as if it had arrived late.",
  "events.showParked": "Show parked", "events.showParkedLabel": "Show the parked events of {group}",
  "events.noGroups": "No consumer group has reported yet.",
  "events.live": "Refreshed every 3 s while this page is visible. Lag, health and handled counts are this instance's (since it started); waiting rows and parked events are the database's.",
  "events.parkedTitle": "Parked events", "events.filterGroup": "Group", "events.allGroups": "all groups",
  "events.filterState": "Show",
  "events.s.open": "open (parked or being replayed)", "events.s.parked": "parked", "events.s.replay": "marked for replay",
  "events.s.replaying": "being replayed", "events.s.replayed": "replayed", "events.s.discarded": "discarded", "events.s.all": "all",
  "events.key": "Key", "events.failure": "Failure", "events.attempts": "Attempts", "events.lastError": "Last error",
  "events.firstError": "first: {error}", "events.parkedAt": "Parked", "events.resolution": "Resolution",
  "events.payload": "Payload", "events.askedBy": "replay asked by {by}",
  "events.f.permanent": "permanent", "events.f.unclassified": "unclassified", "events.f.overflow": "overflow",
  "events.f.transient": "transient",
  "events.replay": "Replay", "events.replayOne": "Replay event {id}", "events.discard": "Discard",
  "events.discardOne": "Discard event {id}", "events.reason": "Reason", "events.reasonPlaceholder": "Why it is never to be applied",
  "events.marked": "1 event marked for replay: its group applies it within a few seconds.|{n} events marked for replay: their groups apply them within a few seconds.",
  "events.discardedN": "1 event discarded.|{n} events discarded.",
  "events.nothingChanged": "Nothing changed: no such event is parked any more.",
  "events.noParked": "No parked events.", "events.noOpen": "No open parked events.",
  "events.limited": "Showing the newest {n}.",

  "nav.move": "DB move", "ops.move": "Database move",
  "move.phaseTitle": "Phase", "move.current": "Current", "move.steps": "Move phases",
  "move.p.SrcOnly": "Source only", "move.p.SrcFirst": "Source first", "move.p.DstFirst": "Destination first",
  "move.p.DstOnly": "Destination only",
  "move.help.SrcOnly": "SQLite only; PostgreSQL receives nothing.",
  "move.help.SrcFirst": "SQLite is authoritative: writes go to it first, PostgreSQL receives a copy.",
  "move.help.DstFirst": "PostgreSQL is authoritative: writes go to it first, SQLite receives a copy.",
  "move.help.DstOnly": "PostgreSQL only; SQLite receives nothing.",
  "move.source": "Source", "move.dest": "Destination", "move.epoch": "Epoch", "move.stage": "Stage",
  "move.st.pause": "writes paused", "move.st.flip": "switching", "move.st.aborting": "aborting",
  "move.st.abort": "last switch aborted",
  "move.abort": "Abort the switch", "move.confirmAbort": "Abort the switch in progress? Every instance keeps the phase it has (a switch that already flipped is completed instead). Continue?",
  "move.aborted": "The switch ended.", "move.outcome": "Last switch", "move.members": "Instances in the switch",
  "move.coordinator": "Run by", "move.fenced": "Fenced (refuses writes)", "move.fencedNone": "neither",
  "move.leaseLeft": "lease {d}",
  "move.startTitle": "Start the move", "move.destination": "Destination database URL",
  "move.destinationHint": "A PostgreSQL URL, e.g. postgres://user:password@host:5432/webook. The copy runs in the background.",
  "move.start": "Start the move",
  "move.taskTitle": "Background task", "move.noTask": "No task has run yet.",
  "move.task.copy": "Copy", "move.task.validate": "Validation", "move.task.fix": "Fix",
  "move.ts.running": "running", "move.ts.done": "done", "move.ts.failed": "failed",
  "move.started": "started {time}", "move.ended": "ended {time}, took {d}", "move.runningFor": "running for {d}",
  "move.tables": "Tables", "move.table": "Table", "move.copied": "Copied / rows", "move.progress": "Progress",
  "move.progressOf": "Copy progress of {name}", "move.tableDone": "✓ done", "move.tableCopying": "copying",
  "move.noTables": "No tables yet.",
  "move.syncTitle": "Replication and validation", "move.pendingSource": "Pending for the source",
  "move.pendingDestination": "Pending for the destination", "move.lastValidation": "Last validation",
  "move.notValidated": "not validated yet", "move.scope": "Scope", "move.full": "full",
  "move.since": "rows changed since {time}", "move.checked": "Rows checked", "move.found": "Findings of that run",
  "move.behind": "replication had not caught up: some may be rows in flight, validate again",
  "move.openFindings": "Open findings",
  "move.actions": "Actions", "move.validateFull": "Validate (full)", "move.validateSince": "Validate recent changes",
  "move.sinceMinutes": "Changed in the last (minutes)", "move.badMinutes": "since: enter a number of minutes above 0",
  "move.fix": "Fix findings", "move.switchTo": "Switch to: {phase}", "move.finish": "Finish",
  "move.confirm.SrcOnly.SrcFirst": "Start writing to both databases: writes go to SQLite first, PostgreSQL receives a copy. Continue?",
  "move.confirm.SrcFirst.SrcOnly": "Stop copying writes to PostgreSQL: writes go to SQLite only. Continue?",
  "move.confirm.SrcFirst.DstFirst": "Make the destination authoritative: writes go to PostgreSQL first, SQLite keeps receiving a copy. Continue?",
  "move.confirm.DstFirst.SrcFirst": "Make the source authoritative again: writes go to SQLite first, PostgreSQL keeps receiving a copy. Continue?",
  "move.confirm.DstFirst.DstOnly": "Stop writing to the source. Falling back afterwards is not possible. Continue?",
  "move.confirmFinish": "Finish the move? The answer is the configuration to restart the instances with. Continue?",
  "move.validateStarted": "Validation started.", "move.fixStarted": "Fixing started.", "move.switched": "Switched to: {phase}.",
  "move.finished": "Move finished.", "move.restartWith": "Restart with",
  "move.restartHint": "Restart every instance with this configuration.",
  "move.findingsTitle": "Findings", "move.key": "Key", "move.kind": "Kind", "move.detail": "Detail",
  "move.k.missing_in_destination": "missing in destination", "move.k.extra_in_destination": "extra in destination",
  "move.k.different": "different", "move.fs.open": "open", "move.fs.fixed": "fixed", "move.fs.skipped": "skipped",
  "move.noFindings": "No findings.", "move.reloadFindings": "Reload",
  "nav.notifications": "Notifications", "nav.notificationsUnread": "Notifications, 1 unread|Notifications, {n} unread",
  "notif.title": "Notifications", "notif.none": "No notifications yet.", "notif.markRead": "Mark read",
  "notif.markAllRead": "Mark all read", "notif.allRead": "All notifications marked read.",
  "notif.someone": "someone", "notif.and": " and ", "notif.comma": ", ", "notif.latest": "— latest: {actors}",
  "notif.goneArticle": "an article no longer published", "notif.aComment": "your comment",
  "notif.reply": "{actor} replied to you under {article}", "notif.comment": "{actor} commented on {article}",
  "notif.like.one": "{actor} liked {article}", "notif.like.many": "{n} people liked {article}",
  "notif.collect.one": "{actor} collected {article}", "notif.collect.many": "{n} people collected {article}",
  "notif.follow": "{actor} followed you", "notif.reward": "{actor} rewarded {article} with {amount}",
  "notif.target.article": "article", "notif.target.comment": "comment", "notif.target.user": "account",
  "notif.mod.hide": "A moderator hid your {target}:", "notif.mod.restore": "A moderator restored your {target}:",
  "notif.mod.delete": "A moderator deleted your {target}:", "notif.mod.approve": "A moderator approved your {target}; readers can see it now:",
  "notif.mod.suspendUntil": "Your account is suspended until {time}: you may read, but not write.",
  "notif.mod.suspendForGood": "Your account is suspended for good: you may read, but not write.",
  "notif.mod.lift": "Your account's suspension was lifted.", "notif.mod.generic": "A moderator made a decision about your content.",
  "notif.mod.reason": "Reason: {reason}",
  "notif.prefsTitle": "Do not notify me of",
  "notif.prefsHint": "Nothing new of the kinds checked is kept for you; what you already have stays.",
  "notif.kind.reply": "replies to my comments", "notif.kind.comment": "comments on my articles", "notif.kind.like": "likes",
  "notif.kind.collect": "collects", "notif.kind.follow": "new followers", "notif.kind.reward": "rewards",
  "notif.kind.moderation": "moderators' decisions",

  "ops.moderation": "Moderation",
  "mod.title": "Review queue", "mod.queue": "Review queue", "mod.held": "Held for review", "mod.words": "Word lists",
  "mod.log": "Audit log", "mod.sort": "Order", "mod.sort.count": "most reported first", "mod.sort.newest": "newest report first",
  "mod.queueEmpty": "No open reports.", "mod.target": "{kind} {id}",
  "mod.kind.article": "Article", "mod.kind.comment": "Comment", "mod.kind.user": "User",
  "mod.openReports": "1 open report|{n} open reports", "mod.latest": "latest", "mod.snapshot": "Content as reported:",
  "mod.ownSnapshot": "Content as this report saw it", "mod.moreReports": "…and {n} older open reports",
  "mod.by": "by", "mod.user": "user {id}", "mod.admin": "admin {id}",
  "mod.reason.spam": "spam", "mod.reason.abuse": "abuse", "mod.reason.illegal": "illegal", "mod.reason.other": "other",
  "mod.action.dismiss": "Dismiss", "mod.action.hide": "Hide", "mod.action.restore": "Restore", "mod.action.delete": "Delete",
  "mod.action.suspend": "Suspend", "mod.action.lift": "Lift suspension",
  "mod.reasonPlaceholder": "Reason (required; logged, and a hidden article's author sees it)",
  "mod.reasonFor": "Reason for acting on {target}", "mod.actOn": "Act on {target}", "mod.period": "Suspension period",
  "mod.days": "1 day|{n} days", "mod.forGood": "for good", "mod.hideContent": "also hide their articles and comments",
  "mod.confirmDelete": "Delete {target} {id} for good? This cannot be undone.",
  "mod.confirmForGood": "Suspend user {id} for good?",
  "mod.changed": "Done: {action} — {outcome}; reports closed: {n}.",
  "mod.unchanged": "Nothing changed: {action} — {outcome}; reports closed: {n}.",
  "mod.heldTitle": "Held for review", "mod.heldHint": "Articles and comments a hold word list keeps from readers until approved (restored) or rejected (deleted).",
  "mod.heldArticles": "Articles", "mod.heldComments": "Comments", "mod.heldCommentsEmpty": "No comment is held.",
  "mod.commentText": "Comment", "mod.onArticle": "on article {id}",
  "mod.heldEmpty": "No article is held.", "mod.author": "Author", "mod.heldReason": "Held because", "mod.submitted": "Submitted",
  "mod.approve": "Approve", "mod.reject": "Reject", "mod.confirmReject": "Reject article {id}? Its reader copy is deleted for good.",
  "ops.settings": "Settings",
  "settings.title": "Live settings", "settings.intro": "These settings change without a restart: a saved value applies on this instance at once and on every other within seconds. Reset returns a setting to its start-up value (webook.toml, environment, flags).",
  "settings.key": "Setting", "settings.value": "Value", "settings.startValue": "Start-up value", "settings.by": "Set by",
  "settings.valueOf": "Value of {key}", "settings.reset": "Reset", "settings.startUp": "start-up value",
  "settings.setBy": "{who}, {time}", "settings.admin": "admin {id}", "settings.saved": "{key} saved: every instance applies it within seconds.",
  "settings.resetDone": "{key} is back at its start-up value.", "settings.refusedHere": "Not applied on this instance: {why}",
  "settings.restartOnly": "Settings that need a restart ({n})", "settings.log": "Changes", "settings.from": "From", "settings.to": "To",
  "mod.wordsTitle": "Word lists",
  "mod.wordsIntro": "What is written is screened against these lists: a refuse list's word refuses it, a hold list's word keeps an article from readers until a moderator approves it. Every instance applies a change within seconds.",
  "mod.noLists": "No word lists.", "mod.listTitle": "List “{name}”",
  "mod.editedBy": "{n} words · edited by admin {admin} at {time}", "mod.mode": "Mode",
  "mod.modeHint": "refuse: the write is refused; hold: an article waits for a moderator.",
  "mod.mode.refuse": "refuse", "mod.mode.hold": "hold",
  "mod.wordsLabel": "Words", "mod.wordsHint": "One per line, at most 64 characters each.",
  "mod.deleteList": "Delete list", "mod.confirmDeleteList": "Delete word list “{name}”?",
  "mod.listSaved": "List “{name}” saved.", "mod.listDeleted": "List “{name}” deleted.",
  "mod.newList": "New word list", "mod.listName": "Name", "mod.listNameHint": "1–64 characters; a refusal names it.",
  "mod.createList": "Create list",
  "mod.logTitle": "Audit log", "mod.logEmpty": "Nothing logged.", "mod.filterLog": "Only one target's entries",
  "mod.anyKind": "every target", "mod.kindLabel": "Target", "mod.idLabel": "Id", "mod.filter": "Show",
  "mod.adminCol": "Admin", "mod.actionCol": "Action", "mod.targetCol": "Target", "mod.reasonCol": "Reason", "mod.outcomeCol": "Outcome",
};

const zh = {
  "nav.home": "首页", "nav.search": "搜索", "nav.write": "写文章", "nav.ops": "运维", "nav.me": "我",
  "nav.logout": "退出", "nav.login": "登录", "nav.signup": "注册", "nav.language": "语言",
  "nav.main": "主导航", "nav.section": "栏目",
  "more": "加载更多", "none": "暂无内容。", "save": "保存", "cancel": "取消", "edit": "编辑", "view": "查看",
  "status": "状态", "time": "时间", "updated": "更新时间", "untitled": "（无标题）",
  "status.new": "新文章", "status.draft": "未发表", "status.published": "已发表", "status.withdrawn": "已撤回",
  "status.unknown": "未知",
  "count.likes": "{n} 赞", "count.comments": "{n} 评论",
  "err.network": "网络错误：无法连接服务器。", "err.http": "服务器返回 HTTP {status}。",
  "err.unknown": "出错了。", "err.title": "出错了",
  "notfound.title": "页面不存在", "notfound.body": "这个地址没有内容。",

  "home.title": "webook", "home.hot": "热榜", "home.computedAt": "计算于",
  "home.hotEmpty": "热榜暂时为空。", "home.hotNotYet": "热榜尚未算出，请稍后再试。",
  "home.latest": "最新文章", "home.latestEmpty": "还没有已发表的文章。",
  "home.feed": "我的动态", "home.feedEmpty": "暂无动态：去关注一些作者吧。",
  "home.welcome": "欢迎来到 webook",
  "home.anonymous": "浏览热榜、搜索全部内容。登录后可阅读文章、关注作者、评论和写作。",
  "feed.article": "{actor} 发表了 {article}", "feed.like": "{actor} 赞了 {article}",
  "feed.yourArticle": "你的文章", "feed.follow": "{actor} 关注了你",
  "feed.commentOn": "{actor} 评论了 {article}", "feed.comment": "{actor} 发表了评论",

  "search.title": "搜索", "search.titleFor": "搜索：{q}", "search.label": "搜索文章和用户",
  "search.placeholder": "搜索…", "search.go": "搜索", "search.articles": "文章",
  "search.users": "用户", "search.noArticles": "没有找到文章。", "search.noUsers": "没有找到用户。",
  "search.rebuilding": "搜索索引正在重建，请一分钟后再试。",
  "search.suggestions": "搜索建议", "search.kindArticle": "文章", "search.kindUser": "用户",
  "tag.title": "标签 {id}", "tag.empty": "没有带这个标签的已发表文章。",
  "topic.feed": "Atom 订阅", "topic.follow": "关注话题", "topic.unfollow": "取消关注",
  "topic.sort.new": "最新", "topic.sort.hot": "最多赞",

  "auth.signupTitle": "注册账号", "auth.loginTitle": "登录", "auth.email": "邮箱",
  "auth.password": "密码", "auth.confirmPassword": "确认密码",
  "auth.passwordHint": "至少 8 个字符，包含字母、数字和符号。",
  "auth.signup": "注册", "auth.login": "登录", "auth.haveAccount": "已有账号？",
  "auth.noAccount": "还没有账号？", "auth.withEmail": "邮箱密码登录", "auth.withSms": "短信验证码登录",
  "auth.phone": "手机号", "auth.phoneHint": "中国大陆手机号，例如 13800138000。",
  "auth.sendCode": "发送验证码", "auth.resendIn": "{n} 秒后可重发", "auth.code": "验证码（6 位）",
  "auth.loginWithCode": "验证码登录", "auth.codeSent": "验证码已发送。",

  "article.edit": "编辑", "article.reads": "阅读", "article.likes": "点赞", "article.collects": "收藏",
  "article.comments": "评论", "article.like": "点赞", "article.liked": "已点赞",
  "article.collect": "收藏", "article.collected": "已收藏",
  "reward.title": "打赏作者", "reward.amount": "金额（元）", "reward.amountHint": "¥0.01 至 ¥5000。",
  "reward.send": "打赏", "reward.badAmount": "amount：请输入 0.01 至 5000 元之间的金额，最多两位小数",
  "reward.qrAlt": "支付二维码", "reward.scan": "扫码支付 {amount}，或打开支付页面：",
  "reward.payLink": "打开支付页面", "reward.waiting": "等待支付…",
  "reward.paid": "已支付，谢谢！", "reward.failed": "支付失败或已过期。",
  "reward.s.init": "待支付", "reward.s.paid": "已支付", "reward.s.failed": "失败",
  "comment.title": "评论", "comment.write": "写评论", "comment.post": "发表",
  "comment.reply": "回复", "comment.replyTo": "回复 {name}", "comment.delete": "删除",
  "comment.deleted": "该评论已删除。", "comment.deletedAuthor": "（已删除）",
  "comment.none": "还没有评论。", "comment.more": "更多评论", "comment.moreReplies": "查看全部 {n} 条回复",

  "user.follow": "关注", "user.unfollow": "取消关注", "user.followers": "粉丝", "user.followees": "关注",
  "user.tab.followers": "粉丝", "user.tab.followees": "关注",
  "user.articles": "文章", "user.lists": "文章与关注", "user.noArticles": "暂无已发表的文章。",
  "user.no.followers": "还没有粉丝。", "user.no.followees": "还没有关注任何人。",
  "user.following": "你已关注", "user.editProfile": "编辑个人资料",

  "me.title": "个人资料", "me.profile": "资料", "me.articles": "我的文章", "me.account": "账户",
  "me.edit": "编辑资料", "me.nickname": "昵称", "me.birthday": "生日", "me.birthdayHint": "留空即清除。",
  "me.aboutMe": "个人简介", "me.saved": "已保存。", "me.id": "用户 ID", "me.publicPage": "我的主页",
  "me.noArticles": "你还没有写过文章。",
  "account.balance": "余额", "account.entries": "流水", "account.amount": "金额", "account.memo": "说明",
  "account.sent": "我的打赏", "account.received": "收到的打赏", "account.article": "文章",

  "editor.newTitle": "新文章", "editor.editTitle": "编辑文章", "editor.title": "标题",
  "editor.content": "正文", "editor.contentHint": "纯文本；空一行开始新段落。",
  "editor.tags": "标签", "editor.tagsHint": "用逗号分隔，例如 rust, 数据库。",
  "editor.save": "保存草稿", "editor.publish": "发表", "editor.withdraw": "撤回",
  "editor.confirmWithdraw": "撤回这篇文章？读者将无法再看到它。",
  "editor.withdrawn": "已撤回：读者已看不到它。", "editor.saved": "草稿已于 {time} 保存。",
  "editor.tagsFailed": "文章已保存，但标签未保存：{msg}",
  "editor.richWarning": "这篇文章含有纯文本编辑器无法保留的格式（链接、图片、列表等）：保存后会变成纯文本段落。",

  "ops.jobs": "任务", "ops.findings": "对账差异", "ops.instances": "实例", "ops.events": "事件",
  "jobs.name": "名称", "jobs.cron": "调度（cron）", "jobs.timezone": "时区", "jobs.next": "下次触发",
  "jobs.owner": "持有者", "jobs.lease": "租约", "jobs.executor": "执行器", "jobs.cfg": "配置（JSON）",
  "jobs.misfire": "错过策略", "jobs.timeoutMs": "超时（毫秒）",
  "jobs.stop": "停止", "jobs.resume": "恢复", "jobs.trigger": "立即触发", "jobs.runs": "运行记录",
  "jobs.confirmStop": "停止任务“{name}”？恢复之前它不会再触发。",
  "jobs.never": "不再触发", "jobs.leaseUntil": "至 {time}（{rel}）", "jobs.heartbeat": "心跳 {rel}",
  "jobs.none": "没有任务。", "jobs.live": "页面可见时每 2 秒刷新。",
  "jobs.editTitle": "编辑 {name}", "jobs.addTitle": "添加任务", "jobs.add": "添加任务", "jobs.added": "任务“{name}”已创建。",
  "jobs.nameHint": "1–64 个 A–Z a–z 0–9 . _ - 字符", "jobs.cronHint": "六段（含秒），例如 0 */5 * * * *，或 @every 30s。",
  "jobs.cfgHint": "http 执行器：{\"url\": \"http://…\", \"method\": \"POST\", \"timeout_ms\": 5000}。",
  "jobs.badCfg": "cfg：须为 JSON 对象",
  "jobs.s.waiting": "等待下次触发", "jobs.s.running": "正在运行", "jobs.s.paused": "已停止",
  "jobs.misfire.fire_once": "补跑一次", "jobs.misfire.skip": "跳过", "jobs.misfire.catch_up": "全部补跑",
  "runs.title": "{name} 的最近运行", "runs.id": "ID", "runs.scheduled": "计划时间", "runs.started": "开始时间",
  "runs.duration": "耗时", "runs.error": "错误", "runs.none": "还没有运行记录。", "runs.runningFor": "已运行 {d}",
  "findings.show": "显示", "findings.s.open": "待处理", "findings.s.fixed": "已自动修复", "findings.s.resolved": "已人工处理",
  "findings.s.all": "全部", "findings.billDate": "账单日", "findings.kind": "类型", "findings.tradeNo": "交易号",
  "findings.providerAmt": "渠道金额", "findings.ourAmt": "本方金额", "findings.detail": "详情", "findings.note": "备注",
  "findings.notePlaceholder": "处理方式和原因", "findings.noteFor": "差异 {id} 的备注",
  "findings.actOn": "处理差异 {id}",
  "findings.credit": "入账", "findings.refund": "退款", "findings.resolve": "标记已处理",
  "findings.creditFor": "为差异 {id} 入账", "findings.refundFor": "为差异 {id} 退款",
  "findings.resolveFor": "将差异 {id} 标记已处理", "findings.allowNegative": "允许余额为负",
  "findings.confirmRefund": "将交易 {tradeNo} 退还给付款人？款项经支付平台退回，已入账的金额会被冲回，且无法撤销。",
  "findings.acted": "处理", "findings.by": "（管理员 {uid}）", "findings.auto": "已自动修复",
  "findings.done": "已处理：{action}。", "findings.none": "没有差异。",
  "ops.refunds": "退款",
  "refunds.s.all": "全部", "refunds.s.requested": "已申请", "refunds.s.processing": "处理中", "refunds.s.abnormal": "异常",
  "refunds.s.succeeded": "已退款", "refunds.s.failed": "失败", "refunds.none": "没有退款。",
  "refunds.formTitle": "为支付退款", "refunds.tradeNo": "交易号",
  "refunds.tradeNoHint": "支付的交易号，例如对账差异中的交易号。", "refunds.reason": "原因",
  "refunds.reasonHint": "1–80 字；付款人可见。",
  "refunds.allowNegative": "允许作者余额为负",
  "refunds.allowNegativeHint": "否则，扣回金额超过作者余额的退款会被拒绝。",
  "refunds.submit": "退款", "refunds.confirm": "将交易 {tradeNo} 全额退还给付款人？作者的入账将被冲回，且无法撤销。",
  "refunds.result": "交易 {tradeNo} 的退款 {refundNo}（{amt}）：{status}。",
  "refunds.refundNo": "退款单号", "refunds.biz": "业务", "refunds.amt": "金额", "refunds.requestedBy": "申请人",
  "refunds.admin": "管理员 {uid}", "refunds.negativeAllowed": "允许为负", "refunds.refundedAt": "退款时间",
  "instances.thisOne": "当前实例", "instances.readyz": "就绪状态：", "instances.ready": "就绪",
  "instances.notReady": "未就绪（HTTP {status}）", "instances.mode": "模式", "instances.database": "数据库",
  "instances.redis": "Redis", "instances.details": "详情", "instances.updated": "更新于 {time}；每 5 秒刷新。",
  "instances.id": "实例", "instances.role": "角色", "instances.version": "版本", "instances.started": "启动时间",
  "instances.seen": "最近上报", "instances.this": "当前",

  "events.groupsTitle": "消费组", "events.group": "消费组", "events.topic": "主题", "events.groupTopic": "消费组 / 主题", "events.lag": "延迟",
  "events.health": "状况", "events.waiting": "待处理", "events.parked": "已搁置", "events.replayedCol": "已重放",
  "events.discardedCol": "已丢弃", "events.handled": "已处理 / 失败",
  "events.h.ok": "正常", "events.h.failing": "失败中", "events.h.stuck": "卡住", "events.h.elsewhere": "不在本实例消费",
  "events.failingFor": "已 {d}", "events.oldest": "最早 {d}", "events.replayingN": "另 {n} 个重放中",
  "events.replayGroup": "重放该组全部", "events.replayGroupLabel": "重放 {group} 在 {topic} 上搁置的全部事件",
  "events.confirmReplayGroup": "重放 {group} 在 {topic} 上搁置的事件（{n} 个）？每个都会像迟到的事件一样被应用。",
  "events.showParked": "查看搁置事件", "events.showParkedLabel": "查看 {group} 搁置的事件",
  "events.noGroups": "还没有消费组上报。",
  "events.live": "页面可见时每 3 秒刷新。延迟、状况和处理计数来自当前实例（自启动以来）；待处理行数和搁置事件来自数据库。",
  "events.parkedTitle": "搁置的事件", "events.filterGroup": "消费组", "events.allGroups": "全部消费组",
  "events.filterState": "显示",
  "events.s.open": "未处理（搁置或重放中）", "events.s.parked": "已搁置", "events.s.replay": "待重放",
  "events.s.replaying": "重放中", "events.s.replayed": "已重放", "events.s.discarded": "已丢弃", "events.s.all": "全部",
  "events.key": "键", "events.failure": "失败类型", "events.attempts": "尝试次数", "events.lastError": "最近错误",
  "events.firstError": "首次：{error}", "events.parkedAt": "搁置时间", "events.resolution": "处理情况",
  "events.payload": "载荷", "events.askedBy": "{by} 已请求重放",
  "events.f.permanent": "永久失败", "events.f.unclassified": "未分类", "events.f.overflow": "积压溢出",
  "events.f.transient": "暂时失败",
  "events.replay": "重放", "events.replayOne": "重放事件 {id}", "events.discard": "丢弃",
  "events.discardOne": "丢弃事件 {id}", "events.reason": "原因", "events.reasonPlaceholder": "为什么不再应用它",
  "events.marked": "已标记 {n} 个事件待重放：其消费组会在几秒内应用。",
  "events.discardedN": "已丢弃 {n} 个事件。",
  "events.nothingChanged": "没有变化：该事件已不在搁置状态。",
  "events.noParked": "没有搁置的事件。", "events.noOpen": "没有未处理的搁置事件。",
  "events.limited": "仅显示最新 {n} 条。",

  "nav.move": "数据库迁移", "ops.move": "数据库迁移",
  "move.phaseTitle": "阶段", "move.current": "当前", "move.steps": "迁移阶段",
  "move.p.SrcOnly": "仅源库", "move.p.SrcFirst": "源库优先", "move.p.DstFirst": "目标库优先",
  "move.p.DstOnly": "仅目标库",
  "move.help.SrcOnly": "只用 SQLite；PostgreSQL 不接收任何写入。",
  "move.help.SrcFirst": "以 SQLite 为准：写入先到 SQLite，PostgreSQL 接收副本。",
  "move.help.DstFirst": "以 PostgreSQL 为准：写入先到 PostgreSQL，SQLite 接收副本。",
  "move.help.DstOnly": "只用 PostgreSQL；SQLite 不接收任何写入。",
  "move.source": "源库", "move.dest": "目标库", "move.epoch": "纪元", "move.stage": "切换步骤",
  "move.st.pause": "写入已暂停", "move.st.flip": "正在切换", "move.st.aborting": "正在中止",
  "move.st.abort": "上次切换已中止",
  "move.abort": "中止切换", "move.confirmAbort": "中止正在进行的切换？各实例保持当前阶段（已完成翻转的切换会被补完）。继续吗？",
  "move.aborted": "切换已结束。", "move.outcome": "上次切换", "move.members": "参与切换的实例",
  "move.coordinator": "执行者", "move.fenced": "已隔离（拒绝写入）", "move.fencedNone": "无",
  "move.leaseLeft": "租约 {d}",
  "move.startTitle": "开始迁移", "move.destination": "目标数据库 URL",
  "move.destinationHint": "PostgreSQL 连接 URL，例如 postgres://user:password@host:5432/webook。复制在后台进行。",
  "move.start": "开始迁移",
  "move.taskTitle": "后台任务", "move.noTask": "还没有运行过任务。",
  "move.task.copy": "复制", "move.task.validate": "校验", "move.task.fix": "修复",
  "move.ts.running": "运行中", "move.ts.done": "已完成", "move.ts.failed": "失败",
  "move.started": "开始于 {time}", "move.ended": "结束于 {time}，耗时 {d}", "move.runningFor": "已运行 {d}",
  "move.tables": "数据表", "move.table": "表", "move.copied": "已复制 / 行数", "move.progress": "进度",
  "move.progressOf": "{name} 的复制进度", "move.tableDone": "✓ 完成", "move.tableCopying": "复制中",
  "move.noTables": "还没有数据表。",
  "move.syncTitle": "同步与校验", "move.pendingSource": "待写入源库",
  "move.pendingDestination": "待写入目标库", "move.lastValidation": "最近一次校验",
  "move.notValidated": "尚未校验", "move.scope": "范围", "move.full": "全量",
  "move.since": "{time} 之后变更的行", "move.checked": "已检查行数", "move.found": "本次发现的差异",
  "move.behind": "复制尚未追上：部分差异可能是传输中的行，请再次校验",
  "move.openFindings": "待处理差异",
  "move.actions": "操作", "move.validateFull": "全量校验", "move.validateSince": "校验近期变更",
  "move.sinceMinutes": "最近变更（分钟）", "move.badMinutes": "since：请输入大于 0 的分钟数",
  "move.fix": "修复差异", "move.switchTo": "切换到：{phase}", "move.finish": "完成迁移",
  "move.confirm.SrcOnly.SrcFirst": "开始双写：写入先到 SQLite，PostgreSQL 接收副本。继续吗？",
  "move.confirm.SrcFirst.SrcOnly": "停止向 PostgreSQL 复制写入：只写 SQLite。继续吗？",
  "move.confirm.SrcFirst.DstFirst": "以目标库为准：写入先到 PostgreSQL，SQLite 继续接收副本。继续吗？",
  "move.confirm.DstFirst.SrcFirst": "重新以源库为准：写入先到 SQLite，PostgreSQL 继续接收副本。继续吗？",
  "move.confirm.DstFirst.DstOnly": "停止写入源库。之后将无法回退。继续吗？",
  "move.confirmFinish": "完成迁移？完成后会给出重启各实例所用的配置。继续吗？",
  "move.validateStarted": "校验已开始。", "move.fixStarted": "修复已开始。", "move.switched": "已切换到：{phase}。",
  "move.finished": "迁移已完成。", "move.restartWith": "重启配置",
  "move.restartHint": "请用此配置重启每个实例。",
  "move.findingsTitle": "差异", "move.key": "主键", "move.kind": "类型", "move.detail": "详情",
  "move.k.missing_in_destination": "目标库缺失", "move.k.extra_in_destination": "目标库多余",
  "move.k.different": "内容不同", "move.fs.open": "待处理", "move.fs.fixed": "已修复", "move.fs.skipped": "已跳过",
  "move.noFindings": "没有差异。", "move.reloadFindings": "刷新",
  "nav.notifications": "通知", "nav.notificationsUnread": "通知，{n} 条未读",
  "notif.title": "通知", "notif.none": "还没有通知。", "notif.markRead": "标为已读",
  "notif.markAllRead": "全部标为已读", "notif.allRead": "所有通知已标为已读。",
  "notif.someone": "有人", "notif.and": " 和 ", "notif.comma": "、", "notif.latest": "——最近：{actors}",
  "notif.goneArticle": "一篇已不再公开的文章", "notif.aComment": "你的评论",
  "notif.reply": "{actor} 在 {article} 下回复了你", "notif.comment": "{actor} 评论了 {article}",
  "notif.like.one": "{actor} 赞了 {article}", "notif.like.many": "{n} 人赞了 {article}",
  "notif.collect.one": "{actor} 收藏了 {article}", "notif.collect.many": "{n} 人收藏了 {article}",
  "notif.follow": "{actor} 关注了你", "notif.reward": "{actor} 打赏了 {article} {amount}",
  "notif.target.article": "文章", "notif.target.comment": "评论", "notif.target.user": "账号",
  "notif.mod.hide": "管理员隐藏了你的{target}：", "notif.mod.restore": "管理员恢复了你的{target}：",
  "notif.mod.delete": "管理员删除了你的{target}：", "notif.mod.approve": "管理员审核通过了你的{target}，读者现在可以看到：",
  "notif.mod.suspendUntil": "你的账号已被暂停使用至 {time}：仍可浏览，但不能发布或互动。",
  "notif.mod.suspendForGood": "你的账号已被永久暂停使用：仍可浏览，但不能发布或互动。",
  "notif.mod.lift": "你的账号已恢复正常使用。", "notif.mod.generic": "管理员对你的内容作出了处理。",
  "notif.mod.reason": "原因：{reason}",
  "notif.prefsTitle": "不再通知我",
  "notif.prefsHint": "勾选的类型不再为你生成新通知；已有的通知保留。",
  "notif.kind.reply": "评论的回复", "notif.kind.comment": "文章的评论", "notif.kind.like": "点赞",
  "notif.kind.collect": "收藏", "notif.kind.follow": "新粉丝", "notif.kind.reward": "打赏",
  "notif.kind.moderation": "管理员的处理",

  "ops.moderation": "内容审核",
  "mod.title": "待审举报", "mod.queue": "待审举报", "mod.held": "待审内容", "mod.words": "敏感词表",
  "mod.log": "审核日志", "mod.sort": "排序", "mod.sort.count": "举报最多优先", "mod.sort.newest": "最新举报优先",
  "mod.queueEmpty": "没有待处理的举报。", "mod.target": "{kind} {id}",
  "mod.kind.article": "文章", "mod.kind.comment": "评论", "mod.kind.user": "用户",
  "mod.openReports": "{n} 条待处理举报", "mod.latest": "最新", "mod.snapshot": "被举报时的内容：",
  "mod.ownSnapshot": "该举报时的内容", "mod.moreReports": "……另有 {n} 条较早的待处理举报",
  "mod.by": "举报人", "mod.user": "用户 {id}", "mod.admin": "管理员 {id}",
  "mod.reason.spam": "垃圾广告", "mod.reason.abuse": "辱骂攻击", "mod.reason.illegal": "违法", "mod.reason.other": "其他",
  "mod.action.dismiss": "驳回", "mod.action.hide": "隐藏", "mod.action.restore": "恢复", "mod.action.delete": "删除",
  "mod.action.suspend": "暂停账号", "mod.action.lift": "解除暂停",
  "mod.reasonPlaceholder": "原因（必填；记入日志，被隐藏文章的作者可见）",
  "mod.reasonFor": "处理 {target} 的原因", "mod.actOn": "处理 {target}", "mod.period": "暂停时长",
  "mod.days": "{n} 天", "mod.forGood": "永久", "mod.hideContent": "同时隐藏其文章和评论",
  "mod.confirmDelete": "永久删除{target} {id}？此操作无法撤销。",
  "mod.confirmForGood": "永久暂停用户 {id}？",
  "mod.changed": "已处理：{action}——{outcome}；关闭举报 {n} 条。",
  "mod.unchanged": "没有变化：{action}——{outcome}；关闭举报 {n} 条。",
  "mod.heldTitle": "待审内容", "mod.heldHint": "命中“待审”词表的文章和评论在审核通过（恢复）或拒绝（删除）前对读者不可见。",
  "mod.heldArticles": "文章", "mod.heldComments": "评论", "mod.heldCommentsEmpty": "没有待审评论。",
  "mod.commentText": "评论", "mod.onArticle": "文章 {id}",
  "mod.heldEmpty": "没有待审文章。", "mod.author": "作者", "mod.heldReason": "待审原因", "mod.submitted": "提交时间",
  "mod.approve": "通过", "mod.reject": "拒绝", "mod.confirmReject": "拒绝文章 {id}？其公开版本将被永久删除。",
  "ops.settings": "设置",
  "settings.title": "在线设置", "settings.intro": "这些设置无需重启即可修改：保存后本实例立即生效，其他实例在数秒内生效。“恢复”将设置改回启动时的取值（webook.toml、环境变量、命令行参数）。",
  "settings.key": "设置项", "settings.value": "取值", "settings.startValue": "启动时取值", "settings.by": "修改者",
  "settings.valueOf": "{key} 的取值", "settings.reset": "恢复", "settings.startUp": "启动时取值",
  "settings.setBy": "{who}，{time}", "settings.admin": "管理员 {id}", "settings.saved": "{key} 已保存：所有实例将在数秒内生效。",
  "settings.resetDone": "{key} 已恢复为启动时的取值。", "settings.refusedHere": "本实例未采用：{why}",
  "settings.restartOnly": "需要重启才能修改的设置（{n}）", "settings.log": "修改记录", "settings.from": "原值", "settings.to": "新值",
  "mod.wordsTitle": "敏感词表",
  "mod.wordsIntro": "写入的内容会按这些词表检查：命中“拒绝”词表的内容被拒绝，命中“待审”词表的文章在管理员审核通过前对读者不可见。修改在几秒内对所有实例生效。",
  "mod.noLists": "没有词表。", "mod.listTitle": "词表“{name}”",
  "mod.editedBy": "{n} 个词 · 管理员 {admin} 编辑于 {time}", "mod.mode": "处理方式",
  "mod.modeHint": "拒绝：写入被拒绝；待审：文章等待管理员审核。",
  "mod.mode.refuse": "拒绝", "mod.mode.hold": "待审",
  "mod.wordsLabel": "词语", "mod.wordsHint": "每行一个，每个最多 64 个字符。",
  "mod.deleteList": "删除词表", "mod.confirmDeleteList": "删除词表“{name}”？",
  "mod.listSaved": "词表“{name}”已保存。", "mod.listDeleted": "词表“{name}”已删除。",
  "mod.newList": "新建词表", "mod.listName": "名称", "mod.listNameHint": "1–64 个字符；拒绝提示中会显示它。",
  "mod.createList": "创建词表",
  "mod.logTitle": "审核日志", "mod.logEmpty": "没有日志。", "mod.filterLog": "只看一个对象的日志",
  "mod.anyKind": "全部对象", "mod.kindLabel": "对象", "mod.idLabel": "ID", "mod.filter": "查看",
  "mod.adminCol": "管理员", "mod.actionCol": "操作", "mod.targetCol": "对象", "mod.reasonCol": "原因", "mod.outcomeCol": "结果",
};

const DICTS = { en, zh };

function initial() {
  try {
    const saved = localStorage.getItem(KEY);
    if (saved === "en" || saved === "zh") return saved;
  } catch { /* no storage */ }
  const langs = navigator.languages?.length ? navigator.languages : [navigator.language || "en"];
  return /^zh\b/i.test(langs[0] || "") ? "zh" : "en";
}

let current = initial();

export function lang() { return current; }

export function setLang(l) {
  current = l === "zh" ? "zh" : "en";
  try { localStorage.setItem(KEY, current); } catch { /* no storage */ }
  document.documentElement.lang = current === "zh" ? "zh-CN" : "en";
}

export function acceptLanguage() { return current === "zh" ? "zh-CN,zh;q=0.9" : "en"; }

function lookup(key) {
  const s = DICTS[current][key] ?? en[key];
  return s ?? key;
}

/** The text of `key` with {name} placeholders filled. */
export function t(key, params) {
  let s = lookup(key);
  // "one|other" plural forms, chosen by params.n (English needs them; Chinese does not).
  if (s.includes("|") && params && "n" in params) {
    const [one, other] = s.split("|");
    s = Number(params.n) === 1 ? one : other;
  }
  return params ? s.replace(/\{(\w+)\}/g, (m, k) => (k in params ? String(params[k]) : m)) : s;
}

/** Like t() but the values may be DOM nodes: returns an array of strings and nodes. */
t.parts = (key, params) => {
  const out = [];
  for (const piece of lookup(key).split(/(\{\w+\})/)) {
    const m = /^\{(\w+)\}$/.exec(piece);
    if (m && params && m[1] in params) out.push(params[m[1]]);
    else if (piece) out.push(piece);
  }
  return out;
};

const locale = () => (current === "zh" ? "zh-CN" : undefined);
const fmts = new Map();
function dtf(opts) {
  const k = `${current}|${JSON.stringify(opts)}`;
  if (!fmts.has(k)) fmts.set(k, new Intl.DateTimeFormat(locale(), opts));
  return fmts.get(k);
}

/** A local date and time ("Mar 4, 2025, 10:15" / "2025年3月4日 10:15"). */
export function fmtTime(ms, { seconds = false, dateless = false } = {}) {
  if (ms == null || !Number.isFinite(Number(ms))) return "—";
  const opts = dateless
    ? { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false }
    : { year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", hour12: false };
  if (seconds) opts.second = "2-digit";
  return dtf(opts).format(new Date(Number(ms)));
}

/** "in 12 s" / "3 min ago" relative to `now`. */
export function fmtRelative(ms, now = Date.now()) {
  const diff = (Number(ms) - now) / 1000;
  const abs = Math.abs(diff);
  const rtf = new Intl.RelativeTimeFormat(locale(), { numeric: "always", style: "narrow" });
  if (abs < 90) return rtf.format(Math.round(diff), "second");
  if (abs < 90 * 60) return rtf.format(Math.round(diff / 60), "minute");
  if (abs < 36 * 3600) return rtf.format(Math.round(diff / 3600), "hour");
  return rtf.format(Math.round(diff / 86400), "day");
}

/** A duration in ms as "850 ms", "12.3 s", "4 min 5 s". */
export function fmtDuration(ms) {
  if (ms == null || !Number.isFinite(ms)) return "—";
  if (ms < 1000) return `${Math.max(0, Math.round(ms))} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  const m = Math.floor(ms / 60000);
  const s = Math.round((ms % 60000) / 1000);
  return current === "zh" ? `${m} 分 ${s} 秒` : `${m} min ${s} s`;
}

/** Fen as ¥x.xx (exact: integer arithmetic). */
export function fmtMoney(fen) {
  const n = Math.trunc(Number(fen) || 0);
  const a = Math.abs(n);
  return `${n < 0 ? "-" : ""}¥${Math.floor(a / 100)}.${String(a % 100).padStart(2, "0")}`;
}
