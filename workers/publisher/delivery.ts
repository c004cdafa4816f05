/**
 * The publisher's outbound relay (docs/communications.md): emails over SMTP (nodemailer, pooled), Web Push (web-push:
 * RFC 8291 aes128gcm payload, RFC 8292 VAPID), SMS through the kavenegar and twilio HTTP APIs.
 *
 * It reads the change stream as its own consumer group (`publisher-delivery`): a created or re-queued record that is due
 * is attempted at once. A poll of the records themselves (`touch.delivery.due`) picks up what is due later: retries
 * after their backoff, scheduled emails, records whose sender died (expired lease), records queued while no publisher
 * ran. Each attempt claims its record first (touch.delivery.claim: a conditional QUEUED → SENDING with this instance's
 * lease), so several publishers share the work and a record once SENT is never sent again; a sender that dies
 * mid-attempt leaves a lease that expires, and another instance retries (at least once).
 */
import { CLAIM_ACTION, DUE_ACTION, FILES_ATTACHMENTS_ACTION, FILES_CONTENT_ACTION, type Job, type Outcome, SETTLE_ACTION } from "../../lib/contracts";
import { randomBytes } from "crypto";
import { readFileSync } from "fs";
import { rootCertificates } from "tls";
import type { Transporter } from "nodemailer";
import type { Readable } from "stream";
import { lazy } from "../../lib/lazy";
import type { PlatformConfig } from "../../runtime/config";
import { answerOf, DELIVERABLE, isDeliverable, redactUrl, scrub, secretsOf, smsRequests, type Deliverable } from "../../lib/touch";
import { loadVapid } from "../../runtime/vapid";
import type { OutboxRecord } from "../../events/outbox";
import type { ChangeStream, Consumer } from "../../events/stream";
import { guardedRequest } from "./http";
import { nap } from "../../runtime/nap";
import { actionAvailable } from "../../runtime/health";
import type { MetricRegistry, ServiceBroker } from "moleculer";

/** SMTP and Web Push, loaded by the first message of their kind: a node that sends neither never compiles them. */
const nodemailer = lazy(() => require("nodemailer") as typeof import("nodemailer"));
const webpush = lazy(() => require("web-push") as typeof import("web-push"));

export const DELIVERY_GROUP = "publisher-delivery";
const CONCURRENCY = 16;
const POLL_MS = 500;
/** A claimed record belongs to its publisher this long; a dead publisher's records are retried after it. */
export const LEASE_MS = 60_000;
const SEND_TIMEOUT_MS = 20_000;
const SMTP_CHECK_MS = 30_000;

export const SENDS_TOTAL = "publisher.touch.sends.total";
export const FAILURES_TOTAL = "publisher.touch.failures.total";
export const RETRIES_TOTAL = "publisher.touch.retries.total";
export const LATENCY = "publisher.touch.delivery.latency";

const CHANNEL: Record<Deliverable, string> = { emails: "email", smss: "sms", "push-histories": "push" };

interface Broker {
	nodeID: string;
	call(action: string, params?: unknown): Promise<unknown>;
	isMetricsEnabled(): boolean;
	/** Moleculer's metric registry: read only while isMetricsEnabled() answers true (a broker without metrics may hold none). */
	metrics: object;
}

/** An email record's fields the sender reads (catalog/domains/touch.ts; validated when the record was written). */
interface EmailDoc {
	from?: string;
	to?: string[];
	cc?: string[];
	bcc?: string[];
	reply_to?: string[];
	subject?: string;
	text?: string;
	html?: string;
	attachments?: unknown;
	owner?: unknown;
	clients?: unknown;
}

/** An SMS record's fields the sender reads (catalog/domains/touch.ts). */
type SmsDoc = {
	provider?: unknown;
	receptors: string[];
	message: string;
	sender?: string;
};
interface Logger {
	warn(...a: unknown[]): void;
	info(...a: unknown[]): void;
	debug(...a: unknown[]): void;
}

export class Delivery {
	readonly owner: string;
	private consumer?: Consumer;
	private inflight = new Map<string, Promise<void>>();
	private stopping = false;
	private loop?: Promise<void>;
	private wakeUp?: () => void;
	private mailer?: Transporter;
	private smtpUp = false;
	private smtpCheckedAt = 0;
	/** TLS_CA_FILE's certificates with the default ones, for push and SMS requests; undefined = the default ones. */
	private readonly ca?: string[];

	constructor(
		private broker: Broker,
		private cfg: PlatformConfig,
		private logger: Logger,
	) {
		this.owner = `${broker.nodeID}:${randomBytes(6).toString("hex")}`;
		if (cfg.tlsCaFile) {
			let pem: string;
			try {
				pem = readFileSync(cfg.tlsCaFile, "utf8");
			} catch (err) {
				throw new Error(`TLS_CA_FILE ${cfg.tlsCaFile} cannot be read: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, { cause: err });
			}
			this.ca = [...rootCertificates, pem];
		}
		if (broker.isMetricsEnabled()) {
			const m = this.registry;
			const reg = (type: string, name: string, description: string, extra: object = {}) => {
				if (!m.hasMetric(name)) m.register({ type, name, labelNames: ["channel"], description, ...extra });
			};
			reg("counter", SENDS_TOTAL, "Messages delivered (email, sms, push)");
			reg("counter", FAILURES_TOTAL, "Delivery attempts that failed, by channel");
			reg("counter", RETRIES_TOTAL, "Failed attempts that are retried later, by channel");
			reg("histogram", LATENCY, "Seconds from a message's creation to its delivery", { unit: "seconds", buckets: [0.05, 0.1, 0.5, 1, 5, 30, 60, 300, 1800, 7200] });
		}
	}

	async start(stream: ChangeStream): Promise<void> {
		this.consumer = await stream.consume(DELIVERY_GROUP, async (rec) => this.onChange(rec));
		this.loop = this.poll();
	}

	async stop(): Promise<void> {
		this.stopping = true;
		await this.consumer?.stop();
		this.wakeUp?.();
		await this.loop;
		await Promise.allSettled([...this.inflight.values()]);
		this.mailer?.close();
	}

	/** /status checks: SMTP reachable (when SMTP_URL is set), Web Push keys, each SMS provider set in the environment. */
	checks(): Record<string, () => Promise<boolean>> {
		const out: Record<string, () => Promise<boolean>> = {};
		if (this.cfg.smtpUrl)
			out["smtp"] = async () => {
				if (Date.now() - this.smtpCheckedAt > SMTP_CHECK_MS) {
					this.smtpCheckedAt = Date.now();
					this.smtpUp = await Promise.race([
						this.transport()!
							.verify()
							.then(
								() => true,
								() => false,
							),
						new Promise<boolean>((r) => setTimeout(() => r(false), 1500)),
					]);
				}
				return this.smtpUp;
			};
		out["web push (vapid)"] = async () => {
			try {
				return !!loadVapid(this.cfg).publicKey;
			} catch {
				return false;
			}
		};
		for (const [p, c] of Object.entries(this.cfg.smsProviders)) out[`sms ${p}`] = async () => !!(c.url && c.key);
		return out;
	}

	/** A change of a deliverable record that is queued and due: attempted now (not awaited: the stream moves on). */
	onChange(rec: OutboxRecord): void {
		const ev = rec.event;
		if (ev.source?.db !== "touch" || !isDeliverable(ev.source.collection) || !ev.after) return;
		const c = ev.source.collection;
		if (ev.after[DELIVERABLE[c]] !== "QUEUED") return;
		if (String(ev.after.next_at ?? "") > new Date().toISOString()) return;
		this.kick(c, ev.id);
	}

	private kick(c: Deliverable, id: string): void {
		const key = `${c}/${id}`;
		if (this.stopping || this.inflight.has(key) || this.inflight.size >= CONCURRENCY) return;
		const run = this.attempt(c, id)
			.catch((err) => this.logger.warn(`publisher: delivery of touch/${key} stopped (${(err as Error).message}); it is retried after its lease`))
			.finally(() => {
				this.inflight.delete(key);
				this.wakeUp?.();
			});
		this.inflight.set(key, run);
	}

	private async poll(): Promise<void> {
		while (!this.stopping) {
			try {
				const free = CONCURRENCY - this.inflight.size;
				// Not before the touch service is there (a call to it would log "not registered" on every poll).
				if (free > 0 && actionAvailable(this.broker as unknown as ServiceBroker, `touch.${DUE_ACTION}`)) {
					const due = (await this.broker.call(`touch.${DUE_ACTION}`, { limit: free })) as Array<{ collection: Deliverable; id: string }>;
					for (const d of due) this.kick(d.collection, d.id);
				}
			} catch (err) {
				this.logger.debug(`publisher: looking for due messages failed: ${(err as Error).message}`);
			}
			if (this.stopping) break;
			await nap(POLL_MS, (wake) => (this.wakeUp = wake));
		}
	}

	/** Claim, send, settle. Throws only when touch cannot be reached (the lease then expires and the record is retried). */
	async attempt(c: Deliverable, id: string): Promise<void> {
		const job = (await this.broker.call(`touch.${CLAIM_ACTION}`, { collection: c, id, owner: this.owner, lease_ms: this.cfg.touchLeaseMs || LEASE_MS })) as Job | null;
		if (!job) return;
		let outcome: Outcome;
		try {
			outcome = c === "emails" ? await this.sendEmail(job) : c === "smss" ? await this.sendSms(job) : await this.sendPush(job);
		} catch (err) {
			outcome = { ok: false, reason: (err as Error).message };
		}
		const r = (await this.broker.call(`touch.${SETTLE_ACTION}`, { collection: c, id, owner: this.owner, outcome })) as { settled: boolean; state?: string };
		if (!this.broker.isMetricsEnabled() || !r.settled) return;
		const channel = CHANNEL[c];
		if (outcome.ok) {
			this.registry.increment(SENDS_TOTAL, { channel });
			const created = Date.parse(job.created_at);
			if (!Number.isNaN(created)) this.registry.observe(LATENCY, (Date.now() - created) / 1000, { channel });
		} else {
			this.registry.increment(FAILURES_TOTAL, { channel });
			if (r.state === "QUEUED" || r.state === "RETRIED") this.registry.increment(RETRIES_TOTAL, { channel });
		}
	}

	private get registry(): MetricRegistry {
		return this.broker.metrics as MetricRegistry;
	}

	private transport(): Transporter | undefined {
		if (!this.cfg.smtpUrl) return undefined;
		this.mailer ??= nodemailer().createTransport({
			url: this.cfg.smtpUrl,
			pool: true,
			connectionTimeout: 10_000,
			greetingTimeout: 10_000,
			socketTimeout: SEND_TIMEOUT_MS,
			logger: false,
		});
		return this.mailer;
	}

	private async sendEmail(job: Job): Promise<Outcome> {
		const mailer = this.transport();
		if (!mailer) return { ok: false, permanent: true, reason: "no transport" };
		const d = job.doc as EmailDoc;
		let attachments: Array<{ filename: string; contentType: string; content: Readable }> | undefined;
		try {
			attachments = await this.attachmentsOf(d);
		} catch (err) {
			// A file the email's owner may not read (or gone): will not change on a retry. An unreachable store retries.
			const e = err as { code?: unknown; message?: string };
			if (e.code === 404) return { ok: false, permanent: true, reason: String(e.message) };
			throw err;
		}
		try {
			const info = await mailer.sendMail({
				attachments,
				from: d.from,
				to: d.to,
				cc: d.cc,
				bcc: d.bcc,
				replyTo: d.reply_to,
				subject: d.subject,
				text: d.text,
				html: d.html,
				// One Message-ID per record: a retried send is recognisable as the same message.
				messageId: `<${job.id}@${this.cfg.rootDomain}>`,
				headers: { "X-Platform-Email": job.id },
			});
			return { ok: true, info: { message_id: info.messageId, accepted: info.accepted, rejected: info.rejected, response: info.response } };
		} catch (err) {
			const e = err as Error & { responseCode?: number; code?: string; response?: string };
			const smtp = { code: e.code ?? null, response_code: e.responseCode ?? null, response: e.response ?? null };
			// A 5xx answer (recipient refused, message refused) will not change on a retry.
			const permanent = typeof e.responseCode === "number" && e.responseCode >= 500;
			return { ok: false, permanent, info: smtp, reason: scrub(e.message, this.smtpSecrets()) };
		}
	}

	/**
	 * `attachments` are special/files ids: resolved through the blob store by the special domain (docs/files.md),
	 * each readable by the email's owner in its tenant; content is streamed into the message, never held whole here.
	 */
	private async attachmentsOf(d: EmailDoc): Promise<Array<{ filename: string; contentType: string; content: Readable }> | undefined> {
		const ids = Array.isArray(d.attachments) ? (d.attachments as string[]) : [];
		if (!ids.length) return undefined;
		const who = { owner: d.owner, clients: d.clients };
		const files = (await this.broker.call(FILES_ATTACHMENTS_ACTION, { ids, ...who })) as Array<{ id: string; name: string; mimetype: string }>;
		return Promise.all(
			files.map(async (f) => ({ filename: f.name, contentType: f.mimetype, content: (await this.broker.call(FILES_CONTENT_ACTION, { id: f.id, ...who })) as Readable })),
		);
	}

	private smtpSecrets(): string[] {
		try {
			const u = new URL(this.cfg.smtpUrl ?? "");
			return [u.password, decodeURIComponent(u.password)].filter((s) => s.length >= 3);
		} catch {
			return [];
		}
	}

	private async sendSms(job: Job): Promise<Outcome> {
		const d = job.doc as SmsDoc;
		const provider = String(d.provider);
		if (!job.sms) return { ok: false, permanent: true, reason: "no transport" };
		const secrets = secretsOf(provider, job.sms);
		let requests;
		try {
			requests = smsRequests(provider, job.sms, { receptors: d.receptors, message: d.message, sender: d.sender });
		} catch (err) {
			return { ok: false, permanent: true, reason: scrub((err as Error).message, secrets) };
		}
		const answers: Array<{ receptors: string[]; status: number | null; body: unknown }> = [];
		let failure: Outcome | undefined;
		for (const r of requests) {
			const a = await guardedRequest(r.url, "POST", r.headers, r.body, this.cfg.webhookAllowPrivate, SEND_TIMEOUT_MS, this.ca);
			if (a.detail) this.logger.warn(`publisher: sms ${job.id} not sent: ${a.detail}`);
			answers.push({ receptors: r.receptors, status: a.status, body: scrub(answerOf(a.body), secrets) });
			if (a.status !== null && a.status >= 200 && a.status < 300) continue;
			const reason = scrub(a.error ?? `${provider} answered HTTP ${a.status}`, secrets);
			// Refused address, or a 4xx other than 429 (bad credentials, bad number): not retried.
			const permanent = !!a.refused || (a.status !== null && a.status >= 400 && a.status < 500 && a.status !== 429);
			failure = { ok: false, permanent, reason };
			break;
		}
		const info = scrub({ provider, answers }, secrets);
		return failure ? { ...failure, info } : { ok: true, info };
	}

	private async sendPush(job: Job): Promise<Outcome> {
		const sub = job.subscription;
		if (!sub) return { ok: false, gone: true, reason: "the subscription no longer exists" };
		const vapid = loadVapid(this.cfg);
		let details;
		try {
			details = webpush().generateRequestDetails({ endpoint: sub.endpoint, keys: sub.keys }, JSON.stringify(job.doc.message ?? {}), {
				vapidDetails: { subject: vapid.subject, publicKey: vapid.publicKey, privateKey: vapid.privateKey },
				contentEncoding: "aes128gcm",
				TTL: 24 * 3600,
			});
		} catch (err) {
			return { ok: false, permanent: true, reason: `the subscription cannot be encrypted to: ${(err as Error).message}` };
		}
		const a = await guardedRequest(
			details.endpoint,
			details.method,
			details.headers as Record<string, string>,
			details.body ?? null,
			this.cfg.webhookAllowPrivate,
			SEND_TIMEOUT_MS,
			this.ca,
		);
		if (a.detail) this.logger.warn(`publisher: push ${job.id} not sent: ${a.detail}`);
		const info = { status: a.status, body: answerOf(a.body) };
		if (a.status !== null && a.status >= 200 && a.status < 300) return { ok: true, info };
		if (a.status === 404 || a.status === 410) return { ok: false, gone: true, info, reason: `push service answered ${a.status}: the subscription is gone` };
		const permanent = !!a.refused || (a.status !== null && a.status >= 400 && a.status < 500 && a.status !== 429);
		return { ok: false, permanent, info, reason: a.error ?? `push service answered HTTP ${a.status}` };
	}

	/** SMTP_URL for logs: the password replaced. */
	get smtpLabel(): string | undefined {
		return redactUrl(this.cfg.smtpUrl);
	}
}
