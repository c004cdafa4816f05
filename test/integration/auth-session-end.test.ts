/**
 * Sessions that end as OAuth 2.1 says (issue 33 item 2), through HTTP on two gateways: node A runs every service and a
 * gateway, node B only a gateway; they talk over an in-process transporter and share the platform cache.
 * - A refresh token presented a second time revokes its whole session (RFC 9700 §4.14.2): every access and refresh
 *   token of the session answers 401 at once, on both gateways, even those each gateway had cached as good.
 * - `POST /auth/logout` does what `GET /auth/logout` does.
 * - A wrong client secret answers 401 naming the client, and an unknown client id answers the same.
 */
import { randomBytes } from "crypto";
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { errorBody, LeakWatch, tokenOf } from "../helpers/auth";
import { secondGateway, type SecondGateway } from "../helpers/gateways";

const REVOKED = errorBody(401, "session is revoked");
const REUSED = errorBody(401, "refresh token was already used: its session is revoked, log in again");

let a: TestPlatform;
let gwB: SecondGateway;
let w: LeakWatch;
/** A request through gateway B. */
let onB: TestPlatform["http"];

const rootLogin = () => ({ grant_type: "password", client_id: a.root.client_id, username: a.root.username, password: a.root.password });
const refresh = (token: string) => ({ grant_type: "refresh_token", client_id: a.root.client_id, refresh_token: token });

beforeAll(async () => {
	const id = randomBytes(4).toString("hex");
	a = await bootPlatform({ transporter: "Fake", namespace: `session-end-${id}`, nodeId: `a-${id}` });
	gwB = await secondGateway(a);
	w = new LeakWatch(a);
	onB = gwB.via(w.http);
	w.secret(a.root.password, "root password", true);
	w.secret(a.root.client_secret, "root client secret");
});
afterAll(async () => {
	await gwB?.stop();
	await a?.cleanup();
});

/** Status of `GET /content/notes` with `token` on each gateway. */
async function onBoth(token: string) {
	return { a: (await w.http("GET", "/content/notes", { token })).body, b: (await onB("GET", "/content/notes", { token })).body };
}

describe("refresh token reuse revokes the session", () => {
	test("a refresh token used twice: 401, and every token of its session answers 401 on both gateways at once", async () => {
		const first = await tokenOf(w.http, rootLogin());
		const second = await tokenOf(w.http, refresh(first.refresh_token));
		const third = await tokenOf(onB, refresh(second.refresh_token));
		expect(third.session).toBe(first.session);
		const other = await tokenOf(w.http, rootLogin());
		// Every access token of the session works, and each gateway has it cached as good.
		for (const t of [first.access_token, second.access_token, third.access_token]) {
			expect((await w.http("GET", "/content/notes", { token: t })).status).toBe(200);
			expect((await onB("GET", "/content/notes", { token: t })).status).toBe(200);
		}

		// The first refresh token again (an attacker's copy, or the client's): reuse.
		const t0 = Date.now();
		const reuse = await onB("POST", "/auth/token", { body: refresh(first.refresh_token) });
		expect(reuse.status).toBe(401);
		expect(reuse.body).toEqual(REUSED);
		// Right after the answer: every access token of the session refused on both gateways.
		for (const t of [first.access_token, second.access_token, third.access_token]) expect(await onBoth(t)).toEqual({ a: REVOKED, b: REVOKED });
		// The current refresh token (the legitimate holder's) is dead too.
		for (const body of [refresh(third.refresh_token), refresh(second.refresh_token)]) {
			expect((await w.http("POST", "/auth/token", { body })).body).toEqual(REVOKED);
			expect((await onB("POST", "/auth/token", { body })).body).toEqual(REVOKED);
		}
		expect(Date.now() - t0).toBeLessThan(2000);
		// The session record is closed (the durable revocation).
		const root = await a.rootToken();
		expect((await w.http("GET", `/identity/sessions/${first.session}`, { token: root })).status).toBe(404);

		// Another session of the same user is untouched.
		expect(await onBoth(other.access_token)).toEqual({ a: expect.objectContaining({ items: expect.any(Array) }), b: expect.objectContaining({ items: expect.any(Array) }) });
		expect((await w.http("POST", "/auth/token", { body: refresh(other.refresh_token) })).status).toBe(200);
	});

	test("the current refresh token, once: a new pair as before (no reuse, nothing revoked)", async () => {
		const first = await tokenOf(w.http, rootLogin());
		const second = await tokenOf(w.http, refresh(first.refresh_token));
		expect((await onBoth(second.access_token)).a).toHaveProperty("items");
		expect((await onBoth(first.access_token)).b).toHaveProperty("items");
	});
});

describe("POST /auth/logout", () => {
	test("answers OK; every token of the session then gets 401 on both gateways; repeating (POST or GET) answers OK", async () => {
		const first = await tokenOf(w.http, rootLogin());
		const second = await tokenOf(w.http, refresh(first.refresh_token));
		const other = await tokenOf(w.http, rootLogin());
		for (const t of [first.access_token, second.access_token]) expect((await onB("GET", "/content/notes", { token: t })).status).toBe(200);

		const out = await w.http("POST", "/auth/logout", { token: second.access_token });
		expect(out.status).toBe(200);
		expect(out.body).toEqual({ result: "OK" });
		for (const t of [first.access_token, second.access_token]) expect(await onBoth(t)).toEqual({ a: REVOKED, b: REVOKED });
		expect((await w.http("POST", "/auth/token", { body: refresh(second.refresh_token) })).body).toEqual(REVOKED);
		for (const [m, t] of [
			["POST", first.access_token],
			["GET", second.access_token],
			["POST", second.access_token],
		] as const) {
			const again = m === "POST" ? await onB(m, "/auth/logout", { token: t }) : await w.http(m, "/auth/logout", { token: t });
			expect({ m, status: again.status, body: again.body }).toEqual({ m, status: 200, body: { result: "OK" } });
		}
		expect((await w.http("GET", "/auth/verify", { token: other.access_token })).status).toBe(200);
	});

	test("with an empty JSON body; through ?token= and the cookie; of a client_credential token", async () => {
		const d = await tokenOf(w.http, rootLogin());
		expect((await w.http("POST", "/auth/logout", { token: d.access_token, body: {} })).body).toEqual({ result: "OK" });
		expect((await w.http("GET", "/auth/verify", { token: d.access_token })).body).toEqual(REVOKED);
		const q = await tokenOf(w.http, rootLogin());
		expect((await w.http("POST", `/auth/logout?token=${encodeURIComponent(q.access_token)}`)).body).toEqual({ result: "OK" });
		expect((await w.http("GET", "/auth/verify", { token: q.access_token })).body).toEqual(REVOKED);
		const c = await tokenOf(w.http, rootLogin());
		expect((await w.http("POST", "/auth/logout", { headers: { cookie: `authorization=${c.access_token}` } })).body).toEqual({ result: "OK" });
		expect((await w.http("GET", "/auth/verify", { token: c.access_token })).body).toEqual(REVOKED);
		const cc = await tokenOf(w.http, { grant_type: "client_credential", client_id: a.root.client_id, client_secret: a.root.client_secret });
		expect((await onB("POST", "/auth/logout", { token: cc.access_token })).body).toEqual({ result: "OK" });
		expect((await w.http("GET", "/auth/verify", { token: cc.access_token })).body).toEqual(REVOKED);
	});

	test("no bearer, a bad one or a refresh token → 401; a body with fields → 400; the session lives on", async () => {
		const d = await tokenOf(w.http, rootLogin());
		expect((await w.http("POST", "/auth/logout")).body).toEqual(errorBody(401));
		for (const t of [d.refresh_token, d.access_token.slice(0, -3), "garbage"]) {
			const r = await w.http("POST", "/auth/logout", { token: t });
			expect(r.status).toBe(401);
			expect(r.body).toEqual(errorBody(401));
		}
		const body = await w.http("POST", "/auth/logout", { token: d.access_token, body: { token: d.refresh_token } });
		expect(body.body).toEqual(errorBody(400, "POST /auth/logout takes no body: it ends the session of the bearer token"));
		const list = await w.http("POST", "/auth/logout", { token: d.access_token, body: [] });
		expect(list.body).toEqual(errorBody(400, "POST /auth/logout takes no body: it ends the session of the bearer token"));
		expect((await w.http("GET", "/auth/verify", { token: d.access_token })).status).toBe(200);
	});

	test("a cookie-authenticated POST /auth/logout from another site is refused (403); with the header it works", async () => {
		const d = await tokenOf(w.http, rootLogin());
		const cross = await w.http("POST", "/auth/logout", { headers: { cookie: `authorization=${d.access_token}`, origin: "https://evil.example" } });
		expect(cross.status).toBe(403);
		expect((await w.http("GET", "/auth/verify", { token: d.access_token })).status).toBe(200);
		expect((await w.http("POST", "/auth/logout", { token: d.access_token, headers: { origin: "https://evil.example" } })).body).toEqual({ result: "OK" });
	});
});

describe("a wrong client secret names the client", () => {
	test("client_credentials with a wrong secret, or an unknown client id → 401 naming the client given", async () => {
		for (const grant_type of ["client_credential", "client_credentials"]) {
			const wrong = await w.http("POST", "/auth/token", { body: { grant_type, client_id: a.root.client_id, client_secret: "wrong-secret" } });
			expect(wrong.body).toEqual(errorBody(401, `client secret is invalid for client ${a.root.client_id}`));
		}
		// An unknown id answers the same: the answer does not tell whether the client exists.
		const unknown = "0123456789abcdef01234567";
		expect((await w.http("POST", "/auth/token", { body: { grant_type: "client_credentials", client_id: unknown, client_secret: "wrong-secret" } })).body).toEqual(
			errorBody(401, `client secret is invalid for client ${unknown}`),
		);
		// A client_id that is no id is not repeated.
		const notAnId = await w.http("POST", "/auth/token", { body: { grant_type: "client_credentials", client_id: "my secret text", client_secret: "wrong-secret" } });
		expect(notAnId.body).toEqual(errorBody(401, "client secret is invalid: client_id is not a client id (24 hex digits)"));
		// By HTTP Basic, on a password grant too: it is the client's secret that is wrong.
		const basic = `Basic ${Buffer.from(`${a.root.client_id}:wrong-secret`).toString("base64")}`;
		const viaBasic = await w.http("POST", "/auth/token", {
			headers: { authorization: basic },
			body: { grant_type: "password", username: a.root.username, password: a.root.password },
		});
		expect(viaBasic.body).toEqual(errorBody(401, `client secret is invalid for client ${a.root.client_id}`));
		// The right secret still works.
		expect((await w.http("POST", "/auth/token", { body: { grant_type: "client_credentials", client_id: a.root.client_id, client_secret: a.root.client_secret } })).status).toBe(
			200,
		);
	});
});

test("the OpenAPI document describes POST /auth/logout beside GET", async () => {
	const doc = (await w.http("GET", "/api-json")).body;
	expect(doc.paths["/auth/logout"].get.operationId).toBe("auth_logout");
	expect(doc.paths["/auth/logout"].post).toMatchObject({ operationId: "auth_logout_post", tags: ["auth"] });
	expect(Object.keys(doc.paths["/auth/logout"].post.responses)).toEqual(expect.arrayContaining(["200", "400", "401"]));
});

test("no response of this suite contained a password or a client secret", () => {
	expect(w.leaks()).toEqual([]);
});
