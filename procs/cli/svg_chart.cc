#include "procs/cli/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace marlaas::cli {
namespace {

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

}  // namespace

bool Drawable(double v) { return std::isfinite(v) && std::fabs(v) <= kMaxChartValue; }

std::string LineChartSvg(const std::string& title, const std::string& x_label,
                         const std::string& y_label, const std::vector<ChartSeries>& series) {
  static const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                  "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  const double W = 760, H = 420, L = 60, R = 180, T = 40, B = 50;
  double x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  for (const ChartSeries& s : series)
    for (auto [x, y] : s.points) {
      if (!Drawable(x) || !Drawable(y)) continue;
      x1 = std::max(x1, x);
      y1 = std::max(y1, y);
      y0 = std::min(y0, y);
    }
  auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto py = [&](double y) { return H - B - (y - y0) / (y1 - y0) * (H - T - B); };
  std::string svg;
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" "
                "height=\"100%%\" fill=\"white\"/>\n<text x=\"%.0f\" y=\"22\" font-size=\"15\">%s"
                "</text>\n",
                W, H, L, Escape(title).c_str());
  svg += buf;
  std::snprintf(buf, sizeof(buf),
                "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n"
                "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n",
                L, H - B, W - R, H - B, L, T, L, H - B);
  svg += buf;
  for (int i = 0; i <= 4; ++i) {
    const double yv = y0 + (y1 - y0) * i / 4, xv = x0 + (x1 - x0) * i / 4;
    std::snprintf(buf, sizeof(buf),
                  "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\">%.2g</text>\n"
                  "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">%.3g</text>\n",
                  L - 6, py(yv) + 4, yv, px(xv), H - B + 16, xv);
    svg += buf;
  }
  std::snprintf(buf, sizeof(buf),
                "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">%s</text>\n"
                "<text x=\"14\" y=\"%.0f\" transform=\"rotate(-90 14 %.0f)\" "
                "text-anchor=\"middle\">%s</text>\n",
                (L + W - R) / 2, H - 12, Escape(x_label).c_str(), (T + H - B) / 2, (T + H - B) / 2,
                Escape(y_label).c_str());
  svg += buf;
  for (size_t k = 0; k < series.size(); ++k) {
    const char* color = kColors[k % 10];
    std::string pts;
    for (auto [x, y] : series[k].points) {
      if (!Drawable(x) || !Drawable(y)) continue;
      std::snprintf(buf, sizeof(buf), "%.1f,%.1f ", px(x), py(y));
      pts += buf;
    }
    svg += "<polyline fill=\"none\" stroke=\"" + std::string(color) +
           "\" stroke-width=\"1.5\" points=\"" + pts + "\"/>\n";
    std::snprintf(buf, sizeof(buf),
                  "<rect x=\"%.0f\" y=\"%.0f\" width=\"12\" height=\"3\" fill=\"%s\"/>"
                  "<text x=\"%.0f\" y=\"%.0f\">%s</text>\n",
                  W - R + 10, T + 16.0 * double(k) + 2, color, W - R + 28, T + 16.0 * double(k) + 7,
                  Escape(series[k].name).c_str());
    svg += buf;
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace marlaas::cli
