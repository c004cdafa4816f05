/** What every bench scenario needs around a platform process: a free port, waiting for it, the root's token. */
import { readFileSync } from "fs";
import { createServer, type AddressInfo } from "net";
import path from "path";

export function freePort(): Promise<number> {
	return new Promise((resolve) => {
		const s = createServer();
		s.listen(0, "127.0.0.1", () => {
			const p = (s.address() as AddressInfo).port;
			s.close(() => resolve(p));
		});
	});
}

/** Resolves once `url` answers below 500 (the platform is ready); throws after `ms`. */
export async function waitFor(url: string, ms = 30_000): Promise<void> {
	const until = Date.now() + ms;
	while (Date.now() < until) {
		try {
			if ((await fetch(url)).status < 500) return;
		} catch {
			/* not yet */
		}
		await new Promise((r) => setTimeout(r, 200));
	}
	throw new Error(`${url} did not answer`);
}

/** The seeded root user's access token, from the platform's DATA_DIR/bootstrap.json. */
export async function rootToken(base: string, dataDir: string): Promise<string> {
	const cred = JSON.parse(readFileSync(path.join(dataDir, "bootstrap.json"), "utf8"));
	const r = (await fetch(`${base}/auth/token`, {
		method: "POST",
		headers: { "content-type": "application/json" },
		body: JSON.stringify({ grant_type: "password", client_id: cred.client_id, username: cred.username, password: cred.password }),
	}).then((x) => x.json())) as { data: { access_token: string } };
	return r.data.access_token;
}
