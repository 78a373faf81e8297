package io.statestore.spark;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import org.apache.spark.SparkConf;

/**
 * Reads the provider's settings as the provider does, once per line of standard input ({@code key=value}: that
 * one conf set, every other at its default), and prints a line for each: {@code ok}, or the refusal's message
 * (tests/test_settings.py compares it with the Python side's).
 */
public final class SettingsCheck {
  public static void main(String[] args) throws IOException {
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    for (String line = in.readLine(); line != null; line = in.readLine()) {
      SparkConf conf = new SparkConf(false);
      int eq = line.indexOf('=');
      if (eq > 0) conf.set(line.substring(0, eq), line.substring(eq + 1));
      try {
        ProviderSettings.from(conf);
        ProviderSettings.controllerPort(conf);
        System.out.println("ok");
      } catch (IllegalArgumentException e) {
        System.out.println(e.getMessage());
      }
    }
  }
}
