/** Helpers of the authentication suites (test/integration/auth-*.test.ts): keys, tokens, users, clients, leak tracking. */
import { readFileSync } from "fs";
import path from "path";
import { createHmac } from "crypto";
import jwt from "jsonwebtoken";
import { Aes, encryptEnvelope } from "../../lib/crypto";
import { sharedKeyValue, type KeyValue } from "../../runtime/kv";
import type { HttpResult, TestPlatform } from "./platform";

import { sleep } from "./wait";
export { sleep };

/** The generated keys the platform keeps in DATA_DIR/keys.json. */
export function keysOf(p: TestPlatform): { jwtSecret: string; aesSecret: string } {
	return JSON.parse(readFileSync(path.join(p.dataDir, "keys.json"), "utf8"));
}

export function aesOf(p: TestPlatform): Aes {
	return new Aes(keysOf(p).aesSecret);
}

/** The cache the platform's nodes share (in-process memory here, Redis when REDIS_URL is set). */
export function kvOf(p: TestPlatform): KeyValue {
	return sharedKeyValue(p.cfg.redisUrl, p.cfg.redisPrefix);
}

/** Forgets every failed-login counter and block (services/auth/login-limits.ts), so a suite's tests start afresh. */
export async function clearLoginFailures(p: TestPlatform): Promise<void> {
	const kv = kvOf(p);
	for (const k of await kv.keys("auth:fail:")) await kv.del(k);
}

/** The cache key of the failed-login counter of the root user's account from `ip` (services/auth/login-limits.ts). */
export function rootAccountCounter(p: TestPlatform, ip = "127.0.0.1"): string {
	return `auth:fail:acct:${p.root.client_id}:user.${p.root.user_id}:${ip}`;
}

/** Remaining TTL (ms) of a cache entry, or null when the store cannot tell. */
export async function ttlOf(kv: KeyValue, key: string): Promise<number | null> {
	if (kv.kind === "redis") return (kv as unknown as { client: { pttl(k: string): Promise<number> } }).client.pttl(key);
	const e = (kv as unknown as { map?: Map<string, { v: string; exp: number }> }).map?.get(key);
	return e && e.exp ? e.exp - Date.now() : null;
}

/** x-api-key value as a client builds it: base64 of the AES wire form of the JSON ApiToken. */
export function apiKey(p: TestPlatform, apiToken: Record<string, unknown>): string {
	return encryptEnvelope(aesOf(p), JSON.stringify(apiToken));
}

export function b64url(v: unknown): string {
	return Buffer.from(typeof v === "string" ? v : JSON.stringify(v)).toString("base64url");
}

/** Decodes a JWT payload without verifying it. */
export function payloadOf(token: string): Record<string, any> {
	return JSON.parse(Buffer.from(token.split(".")[1], "base64url").toString("utf8"));
}

/** A JWT of arbitrary header and payload, signed HS256/HS384/HS512 with `secret` (or unsigned for `none`). */
export function forgeJwt(header: Record<string, unknown>, payload: Record<string, unknown>, secret?: string): string {
	const head = `${b64url(header)}.${b64url(payload)}`;
	if (header.alg === "none" || !secret) return `${head}.`;
	const algo = { HS256: "sha256", HS384: "sha384", HS512: "sha512" }[header.alg as string]!;
	return `${head}.${createHmac(algo, secret).update(head).digest("base64url")}`;
}

export function signWith(secret: string, payload: Record<string, unknown>, opts: jwt.SignOptions = {}): string {
	return jwt.sign(payload, secret, { algorithm: "HS256", ...opts });
}

export function errorBody(status: number, message?: string) {
	const names: Record<number, string> = { 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 429: "Too Many Requests" };
	return message === undefined ? { statusCode: status, message: expect.any(String), error: names[status] } : { statusCode: status, message, error: names[status] };
}

type Http = TestPlatform["http"];

/**
 * Records every response text of a suite so that a last test can assert no secret ever left the platform:
 * no registered secret (passwords, client secrets, APTs), no password hash (Argon2id, or bcrypt of earlier versions).
 * A creation response that is meant to show a secret once is marked `revealing` and only checked for password hashes
 * and passwords.
 */
export class LeakWatch {
	private texts: Array<{ what: string; text: string; revealing: boolean }> = [];
	private secrets = new Map<string, { kind: string; neverShown: boolean }>();

	constructor(private readonly p: TestPlatform) {}

	/** `neverShown`: even a creation response must not contain it (passwords). */
	secret(value: string, kind: string, neverShown = false): void {
		this.secrets.set(value, { kind, neverShown });
	}

	readonly http: Http = async (method, pth, opts) => {
		const r = await this.p.http(method, pth, opts);
		this.texts.push({ what: `${method} ${pth} -> ${r.status}`, text: r.text, revealing: false });
		return r;
	};

	/** The same request, whose response is the one creation response allowed to show a generated secret. */
	readonly revealing: Http = async (method, pth, opts) => {
		const r = await this.p.http(method, pth, opts);
		this.texts.push({ what: `${method} ${pth} -> ${r.status}`, text: r.text, revealing: true });
		return r;
	};

	get count(): number {
		return this.texts.length;
	}

	leaks(): string[] {
		const out: string[] = [];
		for (const t of this.texts) {
			if (/\$2[aby]?\$\d\d\$/.test(t.text)) out.push(`${t.what}: bcrypt hash`);
			if (/\$argon2(id|i|d)\$/.test(t.text)) out.push(`${t.what}: argon2 hash`);
			for (const [v, s] of this.secrets) if ((!t.revealing || s.neverShown) && t.text.includes(v)) out.push(`${t.what}: ${s.kind}`);
		}
		return out;
	}
}

export interface UserSpec {
	username?: string;
	email?: string;
	phone?: string;
	password: string;
	subjects?: string[];
}

/** Creates a user with the root token; returns its public record. */
export async function createUser(http: Http, token: string, spec: UserSpec): Promise<Record<string, any>> {
	const r = await http("POST", "/identity/users", { token, body: spec });
	if (r.status !== 200) throw new Error(`user creation failed: ${r.status} ${r.text}`);
	return r.body.data;
}

/** Creates an OAuth client with the root token; returns its record and the secret shown once. */
export async function createClient(http: Http, token: string, body: Record<string, unknown>): Promise<{ id: string; secret: string; data: Record<string, any> }> {
	const r = await http("POST", "/domain/clients", { token, body });
	if (r.status !== 200) throw new Error(`client creation failed: ${r.status} ${r.text}`);
	return { id: r.body.data.id, secret: r.body.data.secret, data: r.body.data };
}

export async function tokenOf(http: Http, body: Record<string, unknown>): Promise<Record<string, any>> {
	const r: HttpResult = await http("POST", "/auth/token", { body });
	if (r.status !== 200) throw new Error(`token request failed: ${r.status} ${r.text}`);
	return r.body.data;
}

/** Waits until `now` is at least `marginMs` away from the next multiple of `periodS` seconds (TOTP boundaries). */
export async function awayFromBoundary(periodS: number, marginMs = 2000): Promise<void> {
	const periodMs = periodS * 1000;
	const left = periodMs - (Date.now() % periodMs);
	if (left < marginMs) await sleep(left + 50);
}
