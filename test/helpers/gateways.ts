/**
 * A second gateway beside a test platform: node B runs the gateway only (services: api) on a DATA_DIR of its own with
 * the platform's keys, on the platform's transporter and cache, as gateways share them in production. The platform
 * must run a transporter (`transporter: "Fake"` joins nodes of one process).
 */
import { rmSync } from "fs";
import { siblingDataDir, type TestPlatform } from "./platform";
import { startPlatform, type Platform } from "../../platform";

type Http = TestPlatform["http"];

export interface SecondGateway {
	node: Platform;
	/** `http` (the platform's, or a LeakWatch's over it) sent to gateway B instead of the platform's own. */
	via(http: Http): Http;
	stop(): Promise<void>;
}

export async function secondGateway(a: TestPlatform, services = ["auth", "identity", "domain"]): Promise<SecondGateway> {
	const dir = siblingDataDir(a.dataDir);
	const node = await startPlatform({ ...a.cfg, dataDir: dir, services: ["api"], nodeId: `b-${a.broker.nodeID}`, port: 0 });
	await node.broker.waitForServices(services, 10_000);
	return {
		node,
		// The platform's http helper reads its `url` at call time.
		via: (http) => async (method, path, opts) => {
			const saved = a.url;
			a.url = node.url!;
			try {
				return await http(method, path, opts);
			} finally {
				a.url = saved;
			}
		},
		async stop() {
			await node.stop();
			rmSync(dir, { recursive: true, force: true });
		},
	};
}
