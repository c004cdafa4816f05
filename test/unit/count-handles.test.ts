/**
 * Moleculer's process metrics count `process._getActiveHandles()`; on Node 20 that call can abort the process while a
 * handle closes (runtime/metrics.ts countHandlesSafely). Once a node's options are built, the count comes from
 * `process.getActiveResourcesInfo()` instead: a number that follows the handles the process holds.
 */
import net from "net";
import { brokerOptions } from "../../moleculer.config";
import { readConfig } from "../../runtime/config";

describe("the active handles count", () => {
	it("is taken from the resources Node reports, and follows the handles held", async () => {
		brokerOptions({ ...readConfig(), dataDir: "/tmp/count-handles-unused", nodeId: "count-handles" });
		const count = () => (process as unknown as { _getActiveHandles(): unknown[] })._getActiveHandles().length;
		expect(String((process as unknown as { _getActiveHandles: () => unknown })._getActiveHandles)).toContain("getActiveResourcesInfo");
		const before = count();
		const server = net.createServer();
		await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
		expect(count()).toBe(before + 1);
		await new Promise<void>((r) => server.close(() => r()));
		// A closed server's handle is released at the loop's next turn.
		await new Promise((r) => setTimeout(r, 20));
		expect(count()).toBe(before);
	});
});
