/**
 * Dependency outages as clients see them: the one error mapping (lib/errors.ts) turns a cache, store or socket
 * outage into 503 `service unavailable` with a Retry-After, a wrong query stays a 500; and authentication without
 * the cache asks the durable session record, never answering "not revoked" by default.
 */
import { randomBytes } from "crypto";
import { Aes } from "../../lib/crypto";
import { isDependencyOutage, retryAfterOf, toErrorBody, DEFAULT_RETRY_AFTER_S } from "../../lib/errors";
import { CacheUnavailableError, MemoryKeyValue, type KeyValue } from "../../runtime/kv";
import { JwtKeys } from "../../lib/tokens";
import { Authenticator, blacklistSession } from "../../authority/authenticate";

const UNAVAILABLE = { statusCode: 503, message: "service unavailable", error: "Service Unavailable" };

/** An error as it reaches the gateway from another node: name, message, code and data survive the transporter. */
const remote = (o: { name?: string; message: string; code?: unknown; data?: unknown }) => Object.assign(new Error(o.message), o);

describe("the error mapping", () => {
	test.each([
		["PostgreSQL shutting down (57P01)", remote({ message: "terminating connection due to administrator command", code: "57P01" })],
		["PostgreSQL starting up (57P03)", remote({ message: "the database system is starting up", code: "57P03" })],
		["a connection exception (08006)", remote({ message: "connection failure", code: "08006" })],
		["no free connection slot (53300)", remote({ message: "sorry, too many clients already", code: "53300" })],
		["a refused connection", remote({ message: "connect ECONNREFUSED 127.0.0.1:5432", code: "ECONNREFUSED" })],
		["a reset connection", remote({ message: "read ECONNRESET", code: "ECONNRESET" })],
		["node-postgres: connection cut", remote({ message: "Connection terminated unexpectedly" })],
		["node-postgres: connect timeout", remote({ message: "timeout exceeded when trying to connect" })],
		["the cache (CacheUnavailableError)", new CacheUnavailableError("Command timed out")],
		["the cache's error after the transporter", remote({ name: "CacheUnavailableError", message: "service unavailable", code: 503, data: { retryAfter: 2 } })],
	])("%s answers 503 service unavailable with a Retry-After", (_what, err) => {
		expect(toErrorBody(err)).toEqual(UNAVAILABLE);
		expect(retryAfterOf(err, 503)).toBe(2);
	});

	test.each([
		["a SQL syntax error", remote({ message: "syntax error at or near", code: "42601" })],
		["a unique violation surfacing unmapped", remote({ message: "duplicate key value", code: "23505" })],
		["a plain bug", new TypeError("x is undefined")],
	])("%s stays a 500 internal error (not an outage)", (_what, err) => {
		expect(isDependencyOutage(err)).toBe(false);
		expect(toErrorBody(err)).toEqual({ statusCode: 500, message: "internal error", error: "Internal Server Error" });
		expect(retryAfterOf(err, 500)).toBeUndefined();
	});

	test("every 503 gets a Retry-After: the cause's own when valid, else the default", () => {
		expect(retryAfterOf(remote({ message: "x", data: { retryAfter: 7 } }), 503)).toBe(7);
		for (const bad of [0, -1, 1.5, "3", 99999, null]) expect(retryAfterOf(remote({ message: "x", data: { retryAfter: bad } }), 503)).toBe(DEFAULT_RETRY_AFTER_S);
		expect(retryAfterOf(remote({ name: "ServiceNotAvailableError", message: "x" }), 503)).toBe(DEFAULT_RETRY_AFTER_S);
		expect(retryAfterOf(new CacheUnavailableError("x"), 429)).toBeUndefined();
	});
});

/** A cache whose every call fails as Redis does while it is down. */
function downCache(): KeyValue {
	const down = async () => {
		throw new CacheUnavailableError("Connection is closed.");
	};
	return {
		kind: "redis",
		get: down,
		set: down,
		take: down,
		del: down,
		incr: down,
		setIfAbsent: down,
		rateTake: down,
		keys: down,
		ping: async () => false,
		close: async () => undefined,
	};
}

describe("authentication while the cache is down", () => {
	const jwt = new JwtKeys(randomBytes(32).toString("hex"));
	const aes = new Aes(randomBytes(32).toString("hex"));
	const token = (session: string) => jwt.sign({ type: "access", strict: false, cid: "c", scope: "read:*", domain: "d", subject: "s@d", session, client_id: "c" } as never, 600);
	const req = (t: string) => ({ headers: { authorization: `Bearer ${t}` } });

	function authenticator(live: (id: string) => Promise<{ live: boolean } | null>) {
		const call = jest.fn(async (action: string, params: { id: string }) => {
			if (action !== "identity.sessions.live") throw new Error(`unexpected call ${action}`);
			return live(params.id);
		});
		return { auth: new Authenticator({ jwt, aes, kv: downCache(), broker: { call } as never, trustProxy: false }), call };
	}

	test("a live session is accepted on the durable record's word", async () => {
		const { auth, call } = authenticator(async () => ({ live: true }));
		await expect(auth.authenticate(req(token("s1")))).resolves.toMatchObject({ kind: "jwt", token: { session: "s1" } });
		expect(call).toHaveBeenCalledWith("identity.sessions.live", { id: "s1" });
	});

	test("a closed session is refused: the revocation does not fail open without the cache", async () => {
		const { auth } = authenticator(async () => ({ live: false }));
		await expect(auth.authenticate(req(token("s2")))).rejects.toMatchObject({ code: 401, message: "session is revoked" });
	});

	test("when the durable record cannot answer either, the request fails (503), it is not let through", async () => {
		const { auth } = authenticator(async () => {
			throw Object.assign(new Error("Connection terminated unexpectedly"), {});
		});
		const err = await auth.authenticate(req(token("s3"))).catch((e) => e);
		expect(toErrorBody(err)).toEqual(UNAVAILABLE);
	});

	test("blacklisting a session is skipped without the cache (the closed session is the record); other failures still throw", async () => {
		await expect(blacklistSession(downCache(), "s4")).resolves.toBeUndefined();
		const broken = { ...new MemoryKeyValue(), set: async () => Promise.reject(new TypeError("bug")) } as unknown as KeyValue;
		await expect(blacklistSession(broken, "s4")).rejects.toThrow("bug");
	});
});
