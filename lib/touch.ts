/**
 * Pure rules of outbound communications (docs/communications.md): delivery states and retry timing, SMS template
 * filling, the SMS providers' wire shapes (kavenegar, twilio), sealing of push keys and SMS credentials, and the
 * scrubbing of provider answers. No I/O: the touch service and the publisher's delivery engine use these.
 */
import addressparser from "nodemailer/lib/addressparser";
import type { Aes } from "./crypto";
import { badRequest } from "./errors";

export const SEALED = "aes:";

/** The collections the delivery engine sends from, with the field holding each record's delivery state. */
export const DELIVERABLE = { emails: "state", smss: "state", "push-histories": "status" } as const;
export type Deliverable = keyof typeof DELIVERABLE;
export const isDeliverable = (c: unknown): c is Deliverable => typeof c === "string" && Object.prototype.hasOwnProperty.call(DELIVERABLE, c);

/** Seconds before the attempt after `attemptsDone` attempts (jittered ±20 %); undefined once the schedule is used up. */
export function touchRetryDelay(schedule: readonly number[], attemptsDone: number, random: () => number = Math.random): number | undefined {
	if (attemptsDone >= schedule.length) return undefined;
	return schedule[attemptsDone] * (1 + (random() * 2 - 1) * 0.2);
}

const isObject = (v: unknown): v is Record<string, unknown> => !!v && typeof v === "object" && !Array.isArray(v);

/** A push subscription's `keys` (`p256dh`, `auth`): validated, then kept sealed at rest as `{ sealed }`. */
export function sealPushKeys(aes: Aes, keys: unknown): { sealed: string } {
	if (!isObject(keys) || typeof keys.p256dh !== "string" || typeof keys.auth !== "string" || !keys.p256dh || !keys.auth)
		throw badRequest("keys must hold the subscription's p256dh and auth strings");
	if (keys.p256dh.length > 200 || keys.auth.length > 100) throw badRequest("keys.p256dh or keys.auth is too long");
	return { sealed: SEALED + aes.encrypt(JSON.stringify({ p256dh: keys.p256dh, auth: keys.auth })) };
}

export function openPushKeys(aes: Aes, stored: unknown): { p256dh: string; auth: string } | null {
	if (!isObject(stored)) return null;
	if (typeof stored.sealed !== "string" || !stored.sealed.startsWith(SEALED)) {
		// Written before keys were sealed: still usable.
		return typeof stored.p256dh === "string" && typeof stored.auth === "string" ? { p256dh: stored.p256dh, auth: stored.auth } : null;
	}
	const plain = aes.decrypt(stored.sealed.slice(SEALED.length));
	if (!plain) return null;
	try {
		return JSON.parse(plain);
	} catch {
		return null;
	}
}

/**
 * An email's `From`: exactly one mailbox (a display name is allowed), parsed as nodemailer parses it for the header
 * and the SMTP envelope, at one of the tenant's `domains` or a configured sender (TOUCH_EMAIL_SENDERS: an address, or
 * a domain), compared without case. Line breaks and control characters are refused, so no header can be injected.
 * Answers 400 otherwise.
 */
export function assertSender(from: unknown, domains: readonly string[], senders: readonly string[]): void {
	if (typeof from !== "string") return;
	if (/[\u0000-\u001f\u007f]/.test(from)) throw badRequest("from must not contain line breaks or control characters");
	const [mailbox, ...more] = addressparser(from);
	const one = !more.length && mailbox && "address" in mailbox ? String(mailbox.address).toLowerCase() : "";
	if (!/^[^@\s]+@[^@\s]+$/.test(one)) throw badRequest("from must be one email address (a display name is allowed)");
	const domain = one.slice(one.indexOf("@") + 1);
	const allowed = (d: string) => d.toLowerCase() === domain;
	if (domains.some(allowed) || senders.some((s) => (s.includes("@") ? s.toLowerCase() === one : allowed(s)))) return;
	throw badRequest(`from: ${domain} is not a domain of this tenant; send from one of its domains (${domains.join(", ") || "none registered"}) or a sender the platform allows`);
}

/** Credentials of one SMS provider: `key` is the kavenegar API key, or `<sid>:<token>` for twilio. */
export interface SmsCredentials {
	url: string;
	key: string;
	from?: string;
}

/**
 * Seals the `key` of every provider entry of an `SMS` config value (`{ kavenegar: { url, key, from? }, ... }`).
 * On a patch, an entry that omits `key` keeps the stored one; a key already sealed is kept as is.
 */
export function sealSmsValue(aes: Aes, value: Record<string, unknown>, previous?: unknown): Record<string, unknown> {
	const out: Record<string, unknown> = {};
	for (const [provider, entry] of Object.entries(value)) {
		if (!isObject(entry)) throw badRequest(`value.${provider} must be an object { url, key, from? }`);
		const e = { ...entry };
		const prev = isObject(previous) && isObject(previous[provider]) ? previous[provider] : undefined;
		if (e.key === undefined && typeof prev?.key === "string") e.key = prev.key;
		else if (e.key !== undefined && typeof e.key !== "string") throw badRequest(`value.${provider}.key must be a string`);
		// A key from a body is plaintext whatever it looks like: a body never supplies a sealed value.
		else if (typeof e.key === "string") e.key = SEALED + aes.encrypt(e.key);
		out[provider] = e;
	}
	return out;
}

/** An `SMS` config value without its keys (responses, change events). */
export function redactSmsValue(value: Record<string, unknown>): Record<string, unknown> {
	const out: Record<string, unknown> = {};
	for (const [provider, entry] of Object.entries(value)) {
		if (isObject(entry)) {
			const { key: _k, ...rest } = entry;
			out[provider] = rest;
		} else out[provider] = entry;
	}
	return out;
}

/** One provider's credentials in clear from a stored `SMS` value (never log them); null when incomplete. */
export function openSmsCredentials(aes: Aes, value: unknown, provider: string): SmsCredentials | null {
	if (!isObject(value) || !isObject(value[provider])) return null;
	const e = value[provider] as Record<string, unknown>;
	const key = typeof e.key === "string" ? (e.key.startsWith(SEALED) ? aes.decrypt(e.key.slice(SEALED.length)) : e.key) : null;
	if (typeof e.url !== "string" || !key) return null;
	return { url: e.url, key, from: typeof e.from === "string" ? e.from : undefined };
}

/** Fills the `{{param}}` slots of a template text; a slot without a value answers 400 naming it. */
export function fillTemplate(text: string, params: Record<string, unknown>): string {
	return text.replace(/\{\{\s*([A-Za-z0-9_.-]+)\s*\}\}/g, (_m, name: string) => {
		const v = Object.prototype.hasOwnProperty.call(params, name) ? params[name] : undefined;
		if (v === undefined || v === null || (typeof v !== "string" && typeof v !== "number" && typeof v !== "boolean")) throw badRequest(`params.${name} is required by the template`);
		return String(v);
	});
}

export interface WireRequest {
	url: string;
	headers: Record<string, string>;
	body: string;
	/** Receptors this request sends to. */
	receptors: string[];
}

const form = (fields: Record<string, string>) => new URLSearchParams(fields).toString();
const base = (url: string) => url.replace(/\/+$/, "");

/**
 * The provider's HTTP requests for one SMS, as the providers define them:
 * kavenegar `POST {url}/v1/{key}/sms/send.json` (form: receptor comma-separated, message, sender), one request;
 * twilio `POST {url}/2010-04-01/Accounts/{sid}/Messages.json` (form: To, From, Body; Basic sid:token), one per receptor.
 */
export function smsRequests(provider: string, creds: SmsCredentials, sms: { receptors: string[]; message: string; sender?: string }): WireRequest[] {
	const sender = sms.sender ?? creds.from;
	const formType = { "content-type": "application/x-www-form-urlencoded", accept: "application/json" };
	if (provider === "kavenegar") {
		const fields: Record<string, string> = { receptor: sms.receptors.join(","), message: sms.message };
		if (sender) fields.sender = sender;
		return [{ url: `${base(creds.url)}/v1/${encodeURIComponent(creds.key)}/sms/send.json`, headers: formType, body: form(fields), receptors: sms.receptors }];
	}
	if (provider === "twilio") {
		const i = creds.key.indexOf(":");
		if (i <= 0) throw new Error("the twilio key must be <sid>:<token>");
		const sid = creds.key.slice(0, i);
		const auth = `Basic ${Buffer.from(creds.key).toString("base64")}`;
		if (!sender) throw new Error("twilio needs a sender (From): set `from` in the provider's config or `sender` on the SMS");
		return sms.receptors.map((to) => ({
			url: `${base(creds.url)}/2010-04-01/Accounts/${encodeURIComponent(sid)}/Messages.json`,
			headers: { ...formType, authorization: auth },
			body: form({ To: to, From: sender, Body: sms.message }),
			receptors: [to],
		}));
	}
	throw new Error(`unknown SMS provider ${provider}`);
}

/** Every credential fragment a provider answer or error must never carry. */
export function secretsOf(provider: string, creds: SmsCredentials): string[] {
	const out = [creds.key, encodeURIComponent(creds.key)];
	if (provider === "twilio") {
		const [sid, token] = [creds.key.slice(0, creds.key.indexOf(":")), creds.key.slice(creds.key.indexOf(":") + 1)];
		out.push(token, Buffer.from(creds.key).toString("base64"));
		if (sid) out.push(sid);
	}
	return out.filter((s) => s.length >= 4);
}

/** A copy of `v` where every string containing a secret has it replaced by `***` (deep). */
export function scrub<T>(v: T, secrets: readonly string[]): T {
	if (!secrets.length) return v;
	const clean = (s: string) => secrets.reduce((acc, x) => acc.split(x).join("***"), s);
	const walk = (x: unknown, depth: number): unknown => {
		if (typeof x === "string") return clean(x);
		if (depth > 20 || !x || typeof x !== "object") return x;
		if (Array.isArray(x)) return x.map((y) => walk(y, depth + 1));
		const o: Record<string, unknown> = {};
		for (const [k, y] of Object.entries(x)) o[clean(k)] = walk(y, depth + 1);
		return o;
	};
	return walk(v, 0) as T;
}

/** A response body as a bounded JSON value: parsed when it is JSON, else its first 2,000 characters. */
export function answerOf(text: string): unknown {
	const t = text.slice(0, 20_000);
	try {
		return JSON.parse(t);
	} catch {
		return t.slice(0, 2000);
	}
}

/** SMTP_URL without its password, for /status and logs. */
export function redactUrl(url: string | undefined): string | undefined {
	if (!url) return url;
	try {
		const u = new URL(url);
		if (u.password) u.password = "***";
		return u.toString();
	} catch {
		return "(unparsable URL)";
	}
}
