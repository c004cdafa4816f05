/**
 * The x-api-key whitelist for an IPv6 caller: the gateway listens on [::1] and is called over IPv6 loopback
 * (spec: ApiToken `whitelist`, CIDR ranges or single IPs). Its own suite: one platform per process at a time.
 */
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { apiKey, errorBody, LeakWatch, tokenOf } from "../helpers/auth";

let p: TestPlatform;
let w: LeakWatch;

beforeAll(async () => {
	p = await bootPlatform({ host: "::1" });
	const port = (p.broker.getLocalService("api") as any).server.address().port;
	p.url = `http://[::1]:${port}`;
	w = new LeakWatch(p);
	w.secret(p.root.password, "root password", true);
});
afterAll(() => p.cleanup());

test("whitelists with IPv6 entries and CIDRs decide for an IPv6 caller", async () => {
	const t = (await tokenOf(w.http, { grant_type: "password", client_id: p.root.client_id, username: p.root.username, password: p.root.password, strict: true })).access_token;
	const key = (whitelist: string[]) => apiKey(p, { cid: p.root.client_id, client_id: p.root.client_id, expiration_date: new Date(Date.now() + 3600_000).toISOString(), whitelist });
	expect((await w.http("GET", "/auth/verify", { token: t })).body).toEqual(errorBody(403, "strict token must have valid api-key"));
	const inside = [["::1"], ["::1/128"], ["::/0"], ["10.0.0.0/8", "::1"], ["0:0:0:0:0:0:0:1"], ["::0/127"]];
	for (const whitelist of inside) {
		const r = await w.http("GET", "/auth/verify", { token: t, headers: { "x-api-key": key(whitelist) } });
		expect({ whitelist, status: r.status }).toEqual({ whitelist, status: 200 });
	}
	const outside = [["127.0.0.1"], ["127.0.0.0/8"], ["0.0.0.0/0"], ["::2"], ["2001:db8::/32"], ["fe80::/10"]];
	for (const whitelist of outside) {
		const r = await w.http("GET", "/auth/verify", { token: t, headers: { "x-api-key": key(whitelist) } });
		expect({ whitelist, status: r.status }).toEqual({ whitelist, status: 403 });
		expect(r.body).toEqual(errorBody(403, "ip whitelist validation failed"));
	}
	// The session records the IPv6 caller.
	const d = await tokenOf(w.http, { grant_type: "password", client_id: p.root.client_id, username: p.root.username, password: p.root.password });
	expect((await w.http("GET", `/identity/sessions/${d.session}`, { token: d.access_token })).body.data.ip).toBe("::1");
	expect(w.leaks()).toEqual([]);
});
