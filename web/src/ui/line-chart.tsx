// A small SVG line chart of the latest samples (oldest left), scaled 0..max; gaps where a value is
// null. Screen readers get the label and the latest value (the picture adds nothing to them).
export function LineChart({ label, values, max, capacity, format }: { label: string; values: (number | null)[]; max: number; capacity: number; format(value: number): string }) {
  const offset = capacity - values.length;
  const segments: string[][] = [[]];
  values.forEach((value, index) => {
    if (value === null) return void segments.push([]);
    const y = 100 - (Math.min(Math.max(value, 0), max) / max) * 100;
    segments[segments.length - 1]!.push(`${offset + index},${y.toFixed(1)}`);
  });
  const latest = [...values].reverse().find((value) => value !== null);
  const summary = latest === undefined || latest === null ? 'no samples yet' : `now ${format(latest)}`;
  return (
    <figure class="line-chart">
      <figcaption>
        <span>{label}</span> <strong>{latest === undefined || latest === null ? '—' : format(latest)}</strong>
      </figcaption>
      <svg class="chart" viewBox={`0 0 ${Math.max(1, capacity - 1)} 100`} preserveAspectRatio="none" role="img" aria-label={`${label}: ${summary}`}>
        <line class="grid" x1="0" x2={capacity} y1="50" y2="50" />
        {segments
          .filter((points) => points.length > 0)
          .map((points, index) => (
            <polyline key={index} points={points.join(' ')} />
          ))}
      </svg>
    </figure>
  );
}
