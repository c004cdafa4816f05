import type { DomainDef } from "../types";

export const thing: DomainDef = {
	name: "thing",
	restPort: 3150,
	grpcPort: 5150,
	description: "IoT devices, sensors and readings",
	collections: [
		{ name: "devices", description: "Devices", fields: { name: { type: "string", required: true, maxLength: 200 }, serial: { type: "string" } } },
		{
			name: "sensors",
			description: "Sensors",
			fields: { name: { type: "string", required: true, maxLength: 200 }, device: { type: "string", format: "objectId", relation: "thing/devices" } },
		},
		{
			name: "metrics",
			description: "Sensor readings",
			fields: { sensor: { type: "string", format: "objectId", relation: "thing/sensors" }, value: { type: "number", required: true }, at: { type: "date" } },
		},
	],
};
