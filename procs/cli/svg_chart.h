// A minimal SVG line chart (axes, a polyline per series, a legend), for the demo report.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace marlaas::cli {

struct ChartSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y)
};

// Whether a coordinate can be drawn: finite and within +-kMaxChartValue (a wider span would
// overflow the scale). LineChartSvg leaves other points out; callers that read values from files
// count them as damaged first.
inline constexpr double kMaxChartValue = 1e12;
bool Drawable(double v);

std::string LineChartSvg(const std::string& title, const std::string& x_label,
                         const std::string& y_label, const std::vector<ChartSeries>& series);

}  // namespace marlaas::cli
