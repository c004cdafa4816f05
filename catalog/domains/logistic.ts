import type { DomainDef } from "../types";

export const logistic: DomainDef = {
	name: "logistic",
	restPort: 3120,
	grpcPort: 5120,
	description: "Locations, drivers, vehicles, travels and cargoes",
	collections: [
		{
			name: "locations",
			description: "Places",
			fields: { name: { type: "string", required: true, maxLength: 500 }, lat: { type: "number" }, lng: { type: "number" }, address: { type: "string" } },
			specials: [{ action: "resolve", method: "POST", path: "resolve", description: "Resolve a location" }],
		},
		{ name: "drivers", description: "Drivers", fields: { name: { type: "string", required: true, maxLength: 200 }, license: { type: "string" } } },
		{ name: "vehicles", description: "Vehicles", fields: { name: { type: "string", required: true, maxLength: 200 }, plate: { type: "string", maxLength: 50 } } },
		{
			name: "travels",
			description: "Travels",
			fields: {
				origin: { type: "string", format: "objectId", relation: "logistic/locations" },
				destination: { type: "string", format: "objectId", relation: "logistic/locations" },
				driver: { type: "string", format: "objectId", relation: "logistic/drivers" },
				vehicle: { type: "string", format: "objectId", relation: "logistic/vehicles" },
				status: { type: "string", enum: ["PLANNED", "ONGOING", "DONE", "CANCELLED"] },
			},
			specials: [{ action: "resolve", method: "POST", path: "resolve", description: "Resolve a travel" }],
		},
		{
			name: "cargoes",
			description: "Cargoes",
			fields: { name: { type: "string", required: true, maxLength: 200 }, weight: { type: "number" }, travel: { type: "string", format: "objectId", relation: "logistic/travels" } },
		},
	],
};
