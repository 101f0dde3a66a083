// The alert kinds are defined once (src/domain/alert-kinds.ts); openapi.yaml's AlertKind names
// exactly the same set, and its description explains each of them.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { ALERT_KINDS, alertKind, isAlertKind } from '../../src/domain/alert-kinds';

const spec = parse(readFileSync(join(__dirname, '../../openapi.yaml'), 'utf8'));
const specKinds: string[] = spec.components.schemas.AlertKind.enum;

describe('alert kinds', () => {
  it('the registry and openapi.yaml AlertKind are the same set, in the same order', () => {
    expect(ALERT_KINDS.map((definition) => definition.kind)).toEqual(specKinds);
    expect(new Set(specKinds).size).toBe(specKinds.length);
  });

  it('includes the kinds the issue asks for', () => {
    for (const kind of ['webhook_created', 'disk_almost_full', 'webhook_failing', 'instance_error', 'api_key_expiring', 'new_sign_in']) {
      expect(isAlertKind(kind)).toBe(true);
    }
    expect(isAlertKind('nonsense')).toBe(false);
    expect(isAlertKind('toString')).toBe(false);
  });

  it('every kind has a title, a description and a default, and the spec describes it', () => {
    const described: string = spec.components.schemas.AlertKind.description;
    for (const definition of ALERT_KINDS) {
      expect(definition.title.length).toBeGreaterThan(3);
      expect(definition.description.length).toBeGreaterThan(20);
      expect(typeof definition.emailByDefault).toBe('boolean');
      expect(alertKind(definition.kind)).toBe(definition);
      expect(described).toContain(`\`${definition.kind}\``);
    }
  });

  it('alert events carry a registered kind (ControlEventResponse conditions reference AlertKind)', () => {
    const conditions: { if: any; then: any }[] = spec.components.schemas.ControlEventResponse.allOf;
    for (const type of ['alert.raised', 'alert.acknowledged']) {
      const condition = conditions.find((entry) => entry.if.properties.type.const === type);
      expect(condition?.then.properties.data.properties.kind).toEqual({ $ref: '#/components/schemas/AlertKind' });
      expect(condition?.then.properties.resource_type).toEqual({ const: 'alert' });
    }
  });
});
